"""Submissions whose every value is wrong, for "nothing the sandbox says earns a point".

`ZEROS` keeps the exercise's structure (layers, buffers, names) and returns zeros of the right
shape everywhere: the all-zero baseline, what structure alone earns. The others must score no
more than it (issue 43): they once did, because a check believed what the sandbox said about
how a value was made, or gave points for a property (no future leak, moving to a device) to an
output that does not depend on what the exercise says it depends on.

* `NOT_WATCHED`: the variables are noise of the right shape, and the probe API is patched to
  say that no module call was watched;
* `NOISE`: every module returns noise of the right shape, and the variables come out of them;
* `UNIFORM`: attention that ignores the queries and keys (a plain causal average of the values);
* `ZERO_TIMES`: each answer is the right computation times 0 (zeros that keep the input's device
  and gradient graph).
"""
from helpers import make_notebook

HEAD = "import math\nimport torch\nimport torch.nn as nn\n"

FORWARDS = {  # each class's own cell with its forward written anew: "    def forward(self, <input>):\n" + lines
    "ex3_answer": ("x", "        B, N, _ = x.shape\n%(causal)s\n"),
    "ex6_answer": ("x", "        B, N, _ = x.shape\n        H, d_head = self.num_heads, self.d_head\n%(one)s\n"),
    "ex8_model_answer": ("token_ids", "        N = token_ids.shape[1]\n%(lm)s\n"),
}


def with_forward(source, argument, body):
    """A class's answer cell (the reference's) with its forward replaced by `body`."""
    head = source[:source.index("    def forward(self")]
    return head + f"    def forward(self, {argument}):\n" + body


RIGHT_CAUSAL = '''        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = (queries @ keys.transpose(1, 2)).masked_fill(self.mask[:N, :N] == 0, float("-inf"))
        weights = self.dropout(torch.softmax(scores / math.sqrt(self.d_out), dim=-1))'''
RIGHT_ONE = '''        split = lambda t: t.view(B, N, H, d_head).transpose(1, 2)
        queries, keys, values = split(self.W_query(x)), split(self.W_key(x)), split(self.W_value(x))
        scores = (queries @ keys.transpose(2, 3)).masked_fill(self.mask[:N, :N] == 0, float("-inf"))
        weights = self.dropout(torch.softmax(scores / math.sqrt(d_head), dim=-1))'''
UNIFORM_WEIGHTS = '''        keep = torch.tril(torch.ones(N, N, device=x.device))
        weights = self.dropout(keep / keep.sum(-1, keepdim=True))'''
RIGHT_LM = '''        positions = torch.arange(N, device=token_ids.device)
        out = self.prediction_layer(self.att(self.token_embs(token_ids) + self.pos_embs(positions)))'''
WEIGHTS = '''
def mask_after_softmax(qkt, d_out):
%(weights)s

def mask_before_softmax(qkt, d_out):
%(weights)s
'''
RIGHT_WEIGHTS = '''    n = qkt.shape[-1]
    keep = torch.tril(torch.ones(n, n, device=qkt.device))
    weights = torch.softmax(qkt.masked_fill(keep == 0, float("-inf")) / math.sqrt(d_out), dim=-1)'''

KINDS = {
    "zeros": {
        "weights": "    return torch.zeros_like(qkt)",
        "causal": "        return torch.zeros(B, N, self.d_out)",
        "one": "        return torch.zeros(B, N, self.d_out)",
        "lm": "        return torch.zeros(token_ids.shape[0], N, self.vocab_size)",
    },
    "noise": {
        "weights": "    return torch.rand_like(qkt)",
        "causal": "        return torch.randn(B, N, self.d_out)",
        "one": "        return torch.randn(B, N, self.d_out)",
        "lm": "        return torch.randn(token_ids.shape[0], N, self.vocab_size)",
    },
    "uniform": {
        "weights": "    n = qkt.shape[-1]\n    keep = torch.tril(torch.ones(n, n, device=qkt.device))\n"
                   "    return (keep / keep.sum(-1, keepdim=True)).expand_as(qkt).clone()",
        "causal": UNIFORM_WEIGHTS + "\n        return weights @ self.W_value(x)",
        "one": UNIFORM_WEIGHTS + "\n        values = self.W_value(x).view(B, N, H, d_head).transpose(1, 2)\n"
               "        return self.projection((weights @ values).transpose(1, 2).reshape(B, N, self.d_out))",
        "lm": RIGHT_LM + "\n        return out",
    },
    "zero_times": {
        "weights": RIGHT_WEIGHTS + "\n    return 0 * weights",
        "causal": RIGHT_CAUSAL + "\n        return 0 * (weights @ values)",
        "one": RIGHT_ONE + "\n        context = (weights @ values).transpose(1, 2).reshape(B, N, self.d_out)\n"
               "        return 0 * self.projection(context)",
        "lm": RIGHT_LM + "\n        return 0 * out",
    },
}
SCRIPTS = {  # the notebook's own variables: out of the model, as the exercise asks
    "ex4_script": "x_batch = torch.randn(20, 100, 512)\ncausal_model = CausalAttention(d_in=512, d_out=768, context_length=100)\n"
                  "causal_embeddings = causal_model(x_batch)\n",
    "ex5_script": "x_batch = torch.randn(20, 100, 512)\nmultihead_model = MultiHeadAttention(d_in=512, d_out=768, num_heads=3,"
                  " context_length=100)\nmultihead_embeddings = multihead_model(x_batch)\n",
    "ex7_script": "x_batch = torch.randn(40, 80, 768)\nonemodule_model = MultiHeadAttentionOneModule(d_in=768, d_out=1536,"
                  " num_heads=3, context_length=80)\nonemodule_embeddings = onemodule_model(x_batch)\n",
}
NOISE_VARIABLES = {  # noise of the right shape, and a probe API patched to say nothing was watched
    "ex4_script": "causal_embeddings = torch.randn(20, 100, 768)\n",
    "ex5_script": "multihead_embeddings = torch.randn(20, 100, 768)\n",
    "ex7_script": "onemodule_embeddings = torch.randn(40, 80, 1536)\n"
                  "import sys\n_probes = sys.modules.get('autograder.inside.student')\n"
                  "if _probes is not None:\n    _probes.NamespaceStudent.origin = lambda self, *args, **kwargs: {'watched': False}\n",
}
DATA = '''
class MyData(Dataset):
    def __init__(self, text, tokenizer, context_length, stride=1):
        count = len(range(0, len(tokenizer.encode(text)) - context_length, stride))
        self.input_ids = [torch.zeros(context_length, dtype=torch.long) for _ in range(count)]
        self.target_ids = [torch.zeros(context_length, dtype=torch.long) for _ in range(count)]

    def __len__(self):
        return len(self.input_ids)

    def __getitem__(self, idx):
        return self.input_ids[idx], self.target_ids[idx]


def my_batch(text, batch_size, context_length, stride, shuffle=True, drop_last=True, num_workers=0, tokenizer=None):
    if tokenizer is None:
        tokenizer = gpt2_tokenizer()
    return DataLoader(MyData(text, tokenizer, context_length, stride), batch_size=batch_size, shuffle=shuffle,
                      drop_last=drop_last, num_workers=num_workers)


def gpt2_tokenizer():
    import tiktoken

    return tiktoken.get_encoding("gpt2")
'''


def notebook(kind, variables=SCRIPTS):
    """The submission of `kind` (see the module's docstring): the structure of the reference (its
    __init__s, its wrapper of heads), every forward and function written anew."""
    parts = KINDS[kind]
    cells = {"ex1_answer": HEAD + WEIGHTS % parts, "ex2_answer": "",
             "ex8_data_answer": "from torch.utils.data import DataLoader, Dataset\n" + DATA, **variables}
    found = make_notebook()
    for cell in found.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in FORWARDS:
            argument, body = FORWARDS[grade_id]
            cell.source = with_forward(cell.source, argument, body % parts)
        elif grade_id in cells:
            cell.source = cells[grade_id]
    return found


def submissions():
    """{name: notebook} of the baseline and the four that must not beat it."""
    return {"zeros": notebook("zeros"), "not_watched": notebook("zeros", NOISE_VARIABLES),
            "noise": notebook("noise"), "uniform": notebook("uniform"), "zero_times": notebook("zero_times")}
