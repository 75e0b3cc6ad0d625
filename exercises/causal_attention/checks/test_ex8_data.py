"""Exercise 8b (optional): MyData windows and the my_batch DataLoader."""
import pytest
import torch

from autograder.checks import Resource
from autograder.checks import fail
from autograder.checks import diagnosis

TOKENIZER = Resource("byte_tokenizer")  # made in the sandbox by this assignment's sandbox.py
DATASET, LOADER = "torch.utils.data.dataset.Dataset", "torch.utils.data.dataloader.DataLoader"


def batches(student, text, seed=0, **kwargs):
    """What my_batch(text, tokenizer=<bytes>, **kwargs) gives when iterated: (is a DataLoader, batches)."""
    got = student.iterate("my_batch", (text,), {"tokenizer": TOKENIZER, **kwargs}, seed=seed)
    return LOADER in got["types"], got["items"]

LETTERS = "abcdefghijklmnopqrstuvwxyz ,."


def random_text(rng, length):
    picks = torch.randint(0, len(LETTERS), (length,), generator=rng).tolist()
    return "".join(LETTERS[i] for i in picks)


def windows(text, context_length, stride):
    """The expected (input, target) id lists; one byte is one token."""
    ids = list(text.encode())
    return [(ids[s: s + context_length], ids[s + 1: s + context_length + 1])
            for s in range(0, len(ids) - context_length, stride)]


def cut_short(got, expected):
    """How many tokens `got` keeps of `expected` before padding repeats one filler (0, say) to its
    length, where the text has other tokens; 0 when it is not that."""
    for kept in range(len(expected) - 1, 0, -1):
        pad = got[kept:]
        if got[:kept] == expected[:kept] and len(set(pad)) == 1 and pad != expected[kept:]:
            return kept
    return 0


def step_taken(data, ids, context_length, stride):
    """The step the student's windows move by, where it is not `stride` and their first tokens show
    it: 1 or context_length (the two steps code takes when it leaves stride out), else None."""
    firsts = [pair[0].tolist()[:1] if isinstance(pair, list) and pair and type(pair[0]) is torch.Tensor else None
              for pair in data["items"]]
    for step in (1, context_length):
        starts = list(range(0, len(ids) - context_length, step))
        if step != stride and data["length"] == len(starts) and firsts == [ids[s: s + 1] for s in starts]:
            return step
    return None


def expect_pair(pair, want, where):
    if not (isinstance(pair, list) and len(pair) == 2):
        fail(f"{where} should be a pair (input_ids, target_ids).")
    for got, expected, part in zip(pair, want, ("input_ids", "target_ids")):
        if type(got) is not torch.Tensor or got.dtype != torch.int64:
            fail(f"{where}: {part} should be a LongTensor (torch.tensor of a list of ints).")
        if list(got.shape) != [len(expected)]:
            fail(f"{where}: {part} should have length {len(expected)} (context_length),"
                 f" got shape {tuple(got.shape)}.")
    inputs, targets = (t.tolist() for t in pair)
    for got, expected, part in zip((inputs, targets), want, ("input_ids", "target_ids")):
        kept = cut_short(got, expected)
        if kept:
            fail(f"{where}: {part} holds the window's first {kept} tokens, then {len(got) - kept} padding"
                 f" token{'s' if len(got) - kept != 1 else ''} where the text goes on: the slice is cut short."
                 f" Take the whole {len(expected)} tokens, ids[start : start + context_length]"
                 f"{'' if part == 'input_ids' else ' moved one to the right'}, with no padding.")
    if inputs != want[0]:
        fail(f"{where}: input_ids are not the expected window of tokens. Windows start at"
             " range(0, len(ids) - context_length, stride) and are context_length long.")
    if targets == inputs:
        fail(f"{where}: the targets equal the inputs. The target is the next token at every"
             " position: ids[start + 1 : start + context_length + 1].")
    if targets != want[1]:
        fail(f"{where}: target_ids should be the input window moved one token to the right.")


@pytest.mark.weight(2)
@pytest.mark.parametrize("context_length, stride", [(4, 1), (5, 3), (4, 4)])
def test_dataset_windows(student, rng, context_length, stride):
    """MyData: one item per window, windows moved by `stride`, targets shifted by one token"""
    text = random_text(rng, 23)
    want = windows(text, context_length, stride)
    data = student.sequence("MyData", (text, TOKENIZER, context_length, stride))
    if DATASET not in data["types"]:
        fail("MyData should be a subclass of torch.utils.data.Dataset.")
    if data["length"] != len(want):
        starts = list(range(0, len(text) - context_length, stride))
        step = step_taken(data, list(text.encode()), context_length, stride)
        moved = "" if step is None else (
            f": your windows move {'one token at a time' if step == 1 else f'by context_length ({step} tokens)'},"
            f" not by stride ({stride})")
        fail(f"For 23 tokens, context_length {context_length} and stride {stride}, expected"
             f" {len(want)} windows (starting at {starts}), got {data['length']}{moved}. Use"
             " range(0, len(ids) - context_length, stride).")
    if len(data["items"]) != len(want):  # the probe reports len() and the items separately
        fail(f"len(dataset) says {data['length']}, but {len(data['items'])} items could be read.")
    for index, (pair, expected) in enumerate(zip(data["items"], want)):
        expect_pair(pair, expected, f"dataset[{index}] (stride {stride})")


@pytest.mark.after("test_dataset_windows")
@pytest.mark.parametrize("drop_last", [True, False])
def test_batches_in_order(student, rng, drop_last):
    """my_batch: batches of (batch_size, context_length), in order, drop_last respected"""
    text = random_text(rng, 19)
    want = windows(text, 4, 1)  # 15 windows
    is_loader, got = batches(student, text, batch_size=4, context_length=4, stride=1,
                             shuffle=False, drop_last=drop_last)
    if not is_loader:
        fail("my_batch should return a torch.utils.data.DataLoader.")
    expected_count = 3 if drop_last else 4
    if len(got) != expected_count:
        fail(f"15 windows in batches of 4 with drop_last={drop_last}: expected"
             f" {expected_count} batches, got {len(got)}. Pass drop_last to the DataLoader.")
    flat = []
    for number, batch in enumerate(got):
        size = 4 if number < 3 else 3
        if not (isinstance(batch, list) and len(batch) == 2):
            fail("Each batch should be a pair (inputs, targets).")
        for part in batch:
            if type(part) is not torch.Tensor or tuple(part.shape) != (size, 4):
                fail(f"Batch {number} should hold tensors of shape {(size, 4)} (batch_size,"
                     f" context_length), got {getattr(part, 'shape', type(part).__name__)}.")
        flat.extend(zip(batch[0].tolist(), batch[1].tolist()))
    if [tuple(map(list, p)) for p in want[: len(flat)]] != [tuple(p) for p in flat]:
        fail("With shuffle=False the batches should hold the windows in order, with targets"
             " shifted by one token. Pass shuffle, and the stride, on to MyData and the DataLoader.")


def window_pairs(batches, context_length):
    """(inputs, targets) rows of every batch, after checking each batch is a small pair of tensors."""
    pairs = []
    for number, batch in enumerate(batches):
        if not (isinstance(batch, list) and len(batch) == 2):
            fail("Each batch should be a pair (inputs, targets).")
        for part in batch:
            if type(part) is not torch.Tensor or part.dim() != 2 or part.shape[1] != context_length \
                    or part.shape[0] > 64:
                fail(f"Batch {number} should hold tensors of shape (batch_size, {context_length}),"
                     f" got {getattr(part, 'shape', type(part).__name__)}.")
        pairs.extend(zip(batch[0].tolist(), batch[1].tolist()))
    return pairs


@pytest.mark.after("test_dataset_windows")
def test_shuffle(student, rng):
    """my_batch with shuffle=True gives every window once, in a new order"""
    text = random_text(rng, 34)
    want = sorted(map(str, windows(text, 4, 1)))  # 30 windows
    _, got = batches(student, text, batch_size=5, context_length=4, stride=1,
                     shuffle=True, drop_last=False, seed=11)
    pairs = window_pairs(got, 4)
    if sorted(str((list(i), list(t))) for i, t in pairs) != want:
        fail("With shuffle=True every window should still appear exactly once.")
    if [str((list(i), list(t))) for i, t in pairs] == list(map(str, windows(text, 4, 1))):
        fail("With shuffle=True the windows came out in order: pass shuffle to the DataLoader.")


@pytest.mark.after("test_dataset_windows")
def test_stride_and_tokenizer_used(student, rng):
    """my_batch passes stride and the given tokenizer on to MyData"""
    text = random_text(rng, 26)
    want = windows(text, 3, 3)  # 8 windows
    _, got = batches(student, text, batch_size=8, context_length=3, stride=3,
                     shuffle=False, drop_last=False)
    pairs = window_pairs(got, 3)
    if [inputs for inputs, _ in pairs[:len(want)]] != [w[0] for w in want]:
        fail("With stride=3, my_batch should give windows starting at 0, 3, 6, ... Pass stride"
             " to MyData, and use the tokenizer argument when it is given.")


def probe(student, rng):
    """The windows of MyData (context 4, stride 2) on two texts, whose lengths tell one window
    too few from one too many; then my_batch's batches in order and shuffled, the last one short."""
    for length in (22, 23):
        text = random_text(rng, length)
        data = student.sequence("MyData", (text, TOKENIZER, 4, 2))
        yield DATASET in data["types"], data["length"], data["items"]
    for shuffle in (False, True):
        got = student.iterate("my_batch", (text,), {"tokenizer": TOKENIZER, "batch_size": 4, "context_length": 4,
                                                    "stride": 2, "shuffle": shuffle, "drop_last": False}, seed=5)
        yield LOADER in got["types"], got["items"]


test_diagnosis = diagnosis(probe)
