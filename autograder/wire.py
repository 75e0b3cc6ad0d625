"""Frames between the grader and a sandbox, and what may cross them.

Both sides speak length-prefixed frames over sockets. The grader sends requests
pickled (it is trusted; the sandbox may read anything it says). The sandbox
answers with JSON when there is no tensor in the answer, with a JSON outline
plus the tensors' bytes (RAW) for the usual answer with tensors, and with
`torch.save` bytes otherwise; the grader reads them only with `json.loads`,
`torch.frombuffer` or `torch.load(weights_only=True)`, and then `check_plain`: no code runs on the
trusted side, and only base-class tensors, numbers, strings, lists and dicts
get through. (torch is imported where it is used, so that a sandbox can be
launched before the grader pays for importing it.)
"""
import contextlib
import io
import json
import os
import pickle
import select
import struct
import time

HEADER = struct.Struct(">Q")
MAX_FRAME = 64 * 2**20  # a request bigger than this is a bug


class WireError(Exception):
    """The other side closed the pipe or sent something that is not a valid frame."""


def keep_freed_memory():
    """Let glibc reuse freed tensor memory instead of unmapping it at once.

    By default every big tensor is a fresh mmap, paid for again in page faults
    (about 3 us per 4 KB on our virtual machines) on each use. Both sides use
    it: the sandbox, so that a forked child starts with free memory, and the
    grading workers, which receive replies of many megabytes all the time.
    """
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.mallopt(M_MMAP_THRESHOLD, 32 * 2**20)
        libc.mallopt(M_TRIM_THRESHOLD, 512 * 2**20)
    except (OSError, AttributeError):
        pass


IOV_MAX = 1024  # buffers one writev takes at most (Linux)


def write_frame(fd, payload, deadline=None):
    """Send one frame. `payload` is a buffer or a list of buffers (sent as one frame
    with writev, so that tensor data is never copied into one big buffer first)."""
    parts = [memoryview(p).cast("B") for p in (payload if isinstance(payload, list) else [payload])]
    parts = [memoryview(HEADER.pack(sum(p.nbytes for p in parts)))] + [p for p in parts if p.nbytes]
    first = 0  # parts before this one are sent
    while first < len(parts):
        _wait(fd, deadline, writing=True)
        try:
            written = os.writev(fd, parts[first:first + IOV_MAX])
        except OSError as error:
            raise WireError(f"pipe closed ({error.__class__.__name__})") from None
        while written:  # skip what was sent, keep the rest of a part sent in half
            if written >= parts[first].nbytes:
                written -= parts[first].nbytes
                first += 1
            else:
                parts[first], written = parts[first][written:], 0


def _wait(fd, deadline, writing=False):
    """With a deadline, never block past it: a peer that stops reading or writing mid-frame
    (a hostile sandbox can) must not hang the grader."""
    if deadline is None:
        return
    left = deadline - time.monotonic()
    ready = select.select([], [fd], [], max(left, 0)) if writing else select.select([fd], [], [], max(left, 0))
    if not (ready[1] if writing else ready[0]):
        raise WireError("timed out in the middle of a frame")


def _read_exactly(fd, size, deadline=None, buffer=None, start=0):
    """Read `size` bytes into buffer[start:size] (a fresh buffer without one); a view of buffer[:size]."""
    if buffer is None:
        buffer = bytearray(size)
    elif len(buffer) < size:
        buffer.extend(bytes(size - len(buffer)))
    view, filled = memoryview(buffer)[:size], start
    while filled < size:
        _wait(fd, deadline)
        try:
            count = os.readv(fd, [view[filled:]])
        except OSError as error:
            raise WireError(f"pipe failed ({error.__class__.__name__})") from None
        if not count:
            raise WireError("pipe closed")
        filled += count
    return view


def read_frame(fd, limit=MAX_FRAME, deadline=None, buffer=None):
    """The next frame's bytes. With `buffer` (a bytearray, grown as needed), the frame
    is read into it and the result is a view that the next read overwrites: a
    grader that reuses one buffer does not pay for fresh memory on every reply."""
    (size,) = HEADER.unpack(bytes(_read_exactly(fd, HEADER.size, deadline)))
    if size > limit:
        raise WireError(f"frame of {size} bytes is over the {limit}-byte limit")
    return _read_exactly(fd, size, deadline, buffer)


def read_reply_frame(fd, deadline=None, buffer=None):
    """Like `read_frame` for a reply, bounded by its kind before a byte of the body is read.

    Header and kind byte arrive in one read (the sandbox writes a frame at once);
    an oversized reply is refused there, so a hostile one costs the grader
    neither the memory to hold it nor the time to parse it."""
    head = bytes(_read_exactly(fd, HEADER.size + 1, deadline))
    (size,), kind = HEADER.unpack(head[:HEADER.size]), head[HEADER.size:]
    if kind not in REPLY_LIMITS or size < 1:
        raise WireError("reply of an unknown kind")
    if size > REPLY_LIMITS[kind]:
        raise WireError(f"reply of {size} bytes is over the {REPLY_LIMITS[kind]}-byte limit for its kind")
    if buffer is None:
        buffer = bytearray(size)
    elif len(buffer) < size:
        buffer.extend(bytes(size - len(buffer)))
    buffer[0:1] = kind
    return _read_exactly(fd, size, deadline, buffer, start=1)


# -- the probe contract: what checks and the sandbox agree on --------------------
# The probe contract: every question the grader may ask of a submission's process. The sandbox's
# agent answers these names alone (inside/agent.py), its in-process twin `NamespaceStudent` has one
# method for each and nothing else public, and the grader's proxy `SandboxStudent` one method each
# (tests/test_contracts.py ties the three). "fork" and "seal" are the channel's own, not probes.
PROBES = ("kind", "value", "call", "call_with_modules", "new", "build", "structure", "parameters", "buffers",
          "load_parameters", "forward", "vjp", "meta_forward", "sequence", "iterate", "origin", "recorded_call",
          "replay", "trace")


class StudentError(Exception):
    """The submission raised or returned something unusable (student-facing)."""


class Resource:
    """Stands for an object that the assignment's own sandbox code makes (a tokenizer, say).

    A check passes `Resource("name")` in a probe's arguments; the side that runs the
    student's code builds the object with the assignment's `RESOURCES["name"]()`,
    so the engine needs to know nothing about it.
    """

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"Resource({self.name!r})"


@contextlib.contextmanager
def seeded(seed=None):  # both sides seed alike: checks rebuild what the student's run drew
    """Like `torch.manual_seed(seed)` inside `torch.random.fork_rng(devices=[])`.

    Only the CPU generator is seeded and restored afterwards. `torch.manual_seed`
    also queues a seed call, with a stack trace, for every accelerator backend
    that has not started: about 1 ms a call, in a list that only grows in a
    long-lived process without a GPU.
    """
    import torch

    generator = torch.default_generator
    state = generator.get_state()
    if seed is not None:
        generator.manual_seed(seed)
    try:
        yield
    finally:
        generator.set_state(state)


# -- requests: grader -> sandbox ----------------------------------------------
class _RequestPickler(pickle.Pickler):
    """Tensors travel as raw bytes: torch's own pickling runs torch.save per tensor."""

    def persistent_id(self, obj):
        import torch

        if type(obj) is torch.Tensor:
            tensor = obj.detach().cpu().contiguous()
            return ("tensor", str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape),
                    tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
        return None


class _RequestUnpickler(pickle.Unpickler):
    def persistent_load(self, pid):
        import torch

        _, dtype, shape, data = pid
        dtype = getattr(torch, dtype)
        if not data:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(bytearray(data), dtype=dtype).reshape(shape)


def dump_request(message):
    buffer = io.BytesIO()
    _RequestPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(message)
    return buffer.getbuffer()


def load_request(payload):
    # only ever called inside the sandbox, on the grader's bytes
    return _RequestUnpickler(io.BytesIO(payload)).load()


# -- replies: sandbox -> grader -----------------------------------------------
# A reply without tensors is JSON (a tenth of the cost for the many small ones);
# a reply with tensors is torch.save bytes. The first byte says which, and bounds
# the frame before its body is read: JSON parses into up to ~20 times its size in
# Python objects (`[[],[],...`), so it gets a small bound; tensor data is copied
# once, so torch replies may be as big as the biggest honest answer allows
# (MAX_ELEMENTS float32 numbers plus the pickled part).
JSON, TORCH = b"J", b"T"
MAX_JSON_BYTES = 2 * 2**20


def dump_reply(message):
    """The reply as a list of buffers for `write_frame`."""
    if not _tensors(message):
        try:
            return [JSON + json.dumps(message).encode()]
        except (TypeError, ValueError):
            pass  # not JSON-able: torch.save will say what it is, and the grader refuses it
    raw = _raw_reply(message)
    return raw if raw is not None else torch_reply(message)


def torch_reply(message):
    """`message` as torch.save bytes: how a reply RAW does not carry travels."""
    import torch

    parts = _Parts(_tensors(message))
    torch.save(message, parts, _use_new_zipfile_serialization=False)  # a third faster; same safe loader
    return parts.parts


# -- raw replies: a JSON outline plus the tensors' bytes ----------------------------
# The usual answer with tensors (plain tensors of common types in lists, tuples and
# dicts) travels as RAW: a JSON outline in which every JSON object is a tag ({"t": i}
# the i-th tensor, {"u": [...]} a tuple, {"d": {...}} a dict), a list of the tensors'
# dtype and shape, then their bytes, back to back. Reading it takes no unpickler:
# about a tenth of torch.load's cost per reply, on both sides. Anything else (a rare
# dtype, an object that is not plain) still goes through torch.save, and is refused
# there as before.
RAW = b"R"
RAW_HEAD = struct.Struct(">I")  # the outline's length
RAW_DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool")
MAX_DIMS = 16


class _NotRaw(Exception):
    pass


def _raw_reply(message):
    """`message` as RAW buffers, or None if it holds something RAW does not carry."""
    import torch

    tensors, layout = [], []

    def outline(value, depth):
        kind = type(value)
        if value is None or kind in (bool, int, float, str):
            return value
        if depth > 20:
            raise _NotRaw()
        if kind is torch.Tensor:
            name = str(value.dtype).removeprefix("torch.")
            if (name not in RAW_DTYPES or value.layout is not torch.strided or value.device.type != "cpu"
                    or value.dim() > MAX_DIMS):
                raise _NotRaw()
            tensors.append(value.detach().resolve_conj().resolve_neg().contiguous())
            layout.append([name, list(value.shape)])
            return {"t": len(tensors) - 1}
        if kind is list:
            return [outline(item, depth + 1) for item in value]
        if kind is tuple:
            return {"u": [outline(item, depth + 1) for item in value]}
        if kind is dict and all(type(key) is str for key in value):
            return {"d": {key: outline(item, depth + 1) for key, item in value.items()}}
        raise _NotRaw()

    try:
        head = json.dumps({"outline": outline(message, 0), "tensors": layout}, separators=(",", ":")).encode()
        if len(head) > MAX_JSON_BYTES:
            return None  # (torch.save's pickle is more compact)
        parts = _Buffers([bytearray(RAW + RAW_HEAD.pack(len(head)) + head)])
        parts.tensors = tensors  # big parts are views of their memory: keep them alive until sent
        for tensor in tensors:
            if tensor.numel():
                data = memoryview(tensor.reshape(-1).view(torch.uint8).numpy())
                if data.nbytes >= _Parts.KEEP:
                    parts += [data, bytearray()]
                else:
                    parts[-1] += data
    except (_NotRaw, ValueError, TypeError, RuntimeError):
        return None
    return parts


def _bounded_json(text):
    """json.loads, after counting values (commas and brackets in strings only make this
    stricter): a 2 MB reply can hold millions of tiny lists, each 60 bytes of memory."""
    if text.count(b",") + text.count(b"[") + text.count(b"{") > MAX_NODES:
        raise WireError("reply is too big or nested too deeply")
    return json.loads(text)


def _load_raw(body):
    """Decode a RAW reply's body (after its kind byte); raise WireError unless well-formed."""
    head, start = _raw_head(body)
    sizes = _raw_sizes(head["tensors"])
    if start + sum(sizes) != body.nbytes:
        raise WireError("reply's tensor data does not match its outline")
    tensors = _raw_tensors(body, start, head["tensors"], sizes)
    return _rebuild_outline(head["outline"], tensors)


def _raw_head(body):
    """(the outline {"outline", "tensors"}, where the tensor data starts) of a RAW body."""
    if body.nbytes < RAW_HEAD.size:
        raise WireError("reply is cut short")
    (size,) = RAW_HEAD.unpack(bytes(body[:RAW_HEAD.size]))
    start = RAW_HEAD.size + size
    if size > MAX_JSON_BYTES or start > body.nbytes:
        raise WireError("reply outline is over its limit or cut short")
    head = _bounded_json(bytes(body[RAW_HEAD.size:start]))
    if type(head) is not dict or set(head) != {"outline", "tensors"} or type(head["tensors"]) is not list:
        raise WireError("reply outline is malformed")
    return head, start


def _raw_sizes(described):
    """The bytes of each tensor the outline describes ([dtype name, shape]), checked against the
    limits before any memory is taken for them."""
    import math

    import torch

    sizes, elements = [], 0
    for entry in described:
        if (type(entry) is not list or len(entry) != 2 or entry[0] not in RAW_DTYPES or type(entry[1]) is not list
                or len(entry[1]) > MAX_DIMS or any(type(d) is not int or not 0 <= d <= MAX_ELEMENTS for d in entry[1])):
            raise WireError("reply describes a tensor it cannot hold")
        count = math.prod(entry[1])
        elements += count
        if elements > MAX_ELEMENTS:  # before any memory is taken for them
            raise WireError("reply holds too many tensor elements")
        sizes.append(count * torch.empty((), dtype=getattr(torch, entry[0])).element_size())
    return sizes


def _raw_tensors(body, start, described, sizes):
    """The tensors whose data follows the outline in `body`, each in its own memory."""
    import torch

    if body.readonly:
        body = memoryview(bytearray(body))
    tensors, offset = [], start
    for (name, shape), nbytes in zip(described, sizes):
        tensor = torch.empty(shape, dtype=getattr(torch, name))  # its own memory, never the reply's
        if nbytes:
            data = torch.frombuffer(body, dtype=torch.uint8, count=nbytes, offset=offset)
            if name == "bool":  # any byte but 0 is True: no bool tensor holds another value
                tensor.view(-1).copy_(data != 0)
            else:
                tensor.view(-1).view(torch.uint8).copy_(data)
        tensors.append(tensor)
        offset += nbytes
    return tensors


def _rebuild_outline(outline, tensors):
    """The message: the outline with each {"t": i} replaced by tensor i (each used exactly once),
    {"u": [...]} by a tuple and {"d": {...}} by a dict."""
    used = [False] * len(tensors)

    def rebuild(item, depth):
        kind = type(item)
        if item is None or kind in (bool, int, float, str):
            return item
        if depth > 2 * 20 + 2:
            raise WireError("reply is too big or nested too deeply")
        if kind is list:
            return [rebuild(sub, depth + 1) for sub in item]
        if kind is dict and len(item) == 1:
            (tag, value), = item.items()
            if tag == "t" and type(value) is int and 0 <= value < len(tensors) and not used[value]:
                used[value] = True
                return tensors[value]
            if tag == "u" and type(value) is list:
                return tuple(rebuild(sub, depth + 1) for sub in value)
            if tag == "d" and type(value) is dict:
                return {key: rebuild(sub, depth + 1) for key, sub in value.items()}
        raise WireError("reply outline is malformed")

    message = rebuild(outline, 0)
    if not all(used):
        raise WireError("reply outline is malformed")
    return message


def _tensors(value, found=None):
    import torch

    found = [] if found is None else found
    if isinstance(value, torch.Tensor):
        found.append(value)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _tensors(item, found)
    elif isinstance(value, dict):
        for item in value.values():
            _tensors(item, found)
    return found


class _Buffers(list):
    """Buffers to send, with the tensors whose memory some of them view."""


class _Parts:
    """A write-only file that keeps what torch.save writes as a list of buffers.

    torch.save passes each storage's bytes as a view of the tensor's own memory.
    Big views are kept as they are, and the list of buffers keeps those tensors
    alive, instead of being copied into one growing buffer: fresh memory costs a
    page fault every 4 KB, which adds up for megabyte answers. A view that does
    not lie inside one of the message's tensors is copied, to be safe.
    """

    KEEP = 64 * 1024  # smaller writes are copied into one buffer

    def __init__(self, tensors):
        self.parts = _Buffers([bytearray(TORCH)])
        self.parts.tensors = tensors  # the views point into their memory: keep them alive
        self.memory = [(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
                       for t in tensors if t.device.type == "cpu"]

    def write(self, data):
        view = memoryview(data).cast("B")
        if view.nbytes >= self.KEEP and self._inside_a_tensor(view):
            self.parts += [view, bytearray()]
        else:
            self.parts[-1] += view
        return view.nbytes

    def _inside_a_tensor(self, view):
        import numpy

        start = numpy.frombuffer(view, dtype=numpy.uint8).ctypes.data
        return any(first <= start and start + view.nbytes <= first + size for first, size in self.memory)

    def flush(self):
        pass


def _address(buffer):
    import numpy

    return numpy.frombuffer(buffer, dtype=numpy.uint8).ctypes.data


# Limits on the pickled part of a reply (tensor data arrives through readinto). The
# unpickler is pure Python: megabytes of opcodes take seconds, and torch's error
# message for an unknown name takes time quadratic in the name's length.
MAX_PICKLE_BYTES = 2**20  # honest replies hold at most MAX_NODES values: under 1 MB pickled
MAX_LINE = 512


def _spent(reader, data):
    reader.served += len(data)
    if reader.served > MAX_PICKLE_BYTES:
        raise WireError("reply holds too much pickled data")
    return data


class _Recorded(io.BytesIO):
    """io.BytesIO that records where `readinto` put data (see `_check_filled`) and caps
    lines. Used for replies under MAX_PICKLE_BYTES only, so `read` needs no count (and
    stays C code: the unpickler calls it for every opcode)."""

    def __init__(self, data):
        super().__init__(data)
        self.filled = []

    def readline(self, size=-1):
        return super().readline(MAX_LINE if size is None or size < 0 else min(size, MAX_LINE))

    def readinto(self, target):
        count = super().readinto(target)
        if count:
            self.filled.append((_address(target), count))
        return count


class _Reader:
    """A read-only file over a buffer (io.BytesIO would copy the whole buffer first).
    Like `_Recorded`, it records where `readinto` put data."""

    def __init__(self, buffer):
        self.view, self.position = memoryview(buffer).cast("B"), 0
        self.filled, self.served = [], 0

    def _end(self, size):
        left = max(self.view.nbytes - self.position, 0)
        return self.position + (left if size is None or size < 0 else min(size, left))

    def read(self, size=-1):
        end = self._end(size)
        data, self.position = bytes(self.view[self.position:end]), end
        return _spent(self, data)

    def readinto(self, target):
        target = memoryview(target).cast("B")
        end = self._end(target.nbytes)
        target[:end - self.position] = self.view[self.position:end]
        count, self.position = end - self.position, end
        if count:
            self.filled.append((_address(target), count))
        return count

    def readline(self, size=-1):
        end, start = self._end(MAX_LINE if size is None or size < 0 else min(size, MAX_LINE)), self.position
        while start < end:  # lines in a pickle are short: look in small steps
            found = bytes(self.view[start:min(start + 256, end)]).find(b"\n")
            if found >= 0:
                end = start + found + 1
                break
            start += 256
        return self.read(end - self.position)

    def seek(self, offset, whence=0):
        self.position = max({0: 0, 1: self.position, 2: self.view.nbytes}[whence] + offset, 0)
        return self.position

    def tell(self):
        return self.position

    def seekable(self):
        return True

    def readable(self):
        return True


def load_reply(payload):
    """Decode a sandbox reply without running any of its code; raise WireError if not plain.

    Tensors never share memory with `payload`: torch.load copies them out of it."""
    import torch

    kind, body = bytes(payload[:1]), memoryview(payload)[1:]
    if body.nbytes + 1 > REPLY_LIMITS.get(kind, 0):  # bounded before parsing, whoever read the frame
        raise WireError("reply of an unknown kind or over its size limit")
    try:
        if kind == JSON:
            message = _bounded_json(bytes(body))
        elif kind == RAW:
            message = _load_raw(body)
        elif kind == TORCH:
            if bytes(body[:4]) == b"PK\x03\x04":
                # torch.load's zip format reads its pickle with readinto (not counted against
                # MAX_PICKLE_BYTES) and may inflate it: dump_reply never writes it, so refuse
                raise WireError("reply in a format the sandbox never sends")
            # the unpickler reads byte by byte: a Python reader would slow small replies
            source = _Reader(body) if body.nbytes > MAX_PICKLE_BYTES else _Recorded(body)
            message = torch.load(source, weights_only=True, map_location="cpu")
            check_plain(message)  # first: it bounds the walk below
            _check_filled(message, source.filled)
            for tensor in _tensors(message):
                if tensor.dtype == torch.bool:  # any byte but 0 is True, as in RAW replies
                    tensor.view(torch.uint8).clamp_(max=1)
            return message
        else:
            raise WireError("reply of an unknown kind")
    except WireError:
        raise
    except Exception as error:  # weights_only refuses classes, functions, subclasses
        raise WireError(f"reply is not plain data ({type(error).__name__})") from None
    check_plain(message)
    return message


def _check_filled(message, filled):
    """Every byte of every tensor must have been read from the reply.

    torch's loader fills only the storages the reply lists at its end; one left
    off that list would come back as uninitialised memory of this process, which
    may hold a freed tensor such as an earlier submission's answer."""
    merged = []
    for start, size in sorted(filled):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], start + size)
        else:
            merged.append([start, start + size])
    for tensor in _tensors(message):
        storage = tensor.untyped_storage()
        start, size = storage.data_ptr(), storage.nbytes()
        if size and not any(first <= start and start + size <= end for first, end in merged):
            raise WireError("reply holds a tensor whose data is not in the reply")


MAX_NODES = 100_000  # values in one reply
MAX_ELEMENTS = 12 * 2**20  # tensor elements in one reply (the biggest real answer: 4.9 M)
REPLY_LIMITS = {JSON: MAX_JSON_BYTES, TORCH: 4 * MAX_ELEMENTS + 2 * MAX_PICKLE_BYTES,
                RAW: 4 * MAX_ELEMENTS + MAX_JSON_BYTES + RAW_HEAD.size}


def check_plain(value):
    """Accept only exact base types, as a tree of bounded size.

    A Tensor subclass or odd object fails here, and so do the tricks that make a
    tiny reply expensive: shared sub-lists (a tree of 10**18 nodes in 1 KB) and
    zero-stride tensors (10**10 elements backed by one number).
    """
    import torch

    budget = {"nodes": MAX_NODES, "elements": MAX_ELEMENTS}
    seen = set()

    def visit(item, depth):
        budget["nodes"] -= 1
        if budget["nodes"] < 0 or depth > 20:
            raise WireError("reply is too big or nested too deeply")
        kind = type(item)
        if item is None or kind in (bool, int, str, float):
            return
        if kind is torch.Tensor:
            if (item.layout is not torch.strided or item.device.type != "cpu" or item.is_quantized
                    or not item.is_contiguous()
                    or item.untyped_storage().nbytes() != item.numel() * item.element_size()):
                raise WireError("reply holds a tensor that is not a plain, dense CPU tensor")
            if any(size > MAX_ELEMENTS for size in item.shape):  # an empty tensor of shape (0, 2**40)
                raise WireError("reply holds a tensor with a dimension over the limit")
            budget["elements"] -= item.numel()
            if budget["elements"] < 0:
                raise WireError("reply holds too many tensor elements")
            return
        if kind in (list, tuple, dict):
            if item and id(item) in seen:  # (empty tuples are one shared object in Python)
                raise WireError("reply reuses a container (shared references are not plain data)")
            seen.add(id(item))
            if kind is dict:
                for key, sub in item.items():
                    if type(key) is not str:
                        raise WireError("reply holds a dict with non-string keys")
                    visit(sub, depth + 1)
            else:
                for sub in item:
                    visit(sub, depth + 1)
            return
        raise WireError(f"reply holds a {kind.__name__}, which is not plain data")

    visit(value, 0)
