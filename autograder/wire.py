"""Frames between the grader and a sandbox, and what may cross them.

Both sides speak length-prefixed frames over sockets. The grader sends requests
pickled (it is trusted; the sandbox may read anything it says). The sandbox
answers with JSON when there is no tensor in the answer and with `torch.save`
bytes otherwise; the grader reads them only with `json.loads` or
`torch.load(weights_only=True)` and then `check_plain`: no code runs on the
trusted side, and only base-class tensors, numbers, strings, lists and dicts
get through. (torch is imported where it is used, so that a sandbox can be
launched before the grader pays for importing it.)
"""
import io
import json
import os
import pickle
import select
import struct
import time

HEADER = struct.Struct(">Q")
MAX_FRAME = 64 * 2**20  # a reply bigger than this is a broken or hostile sandbox


class WireError(Exception):
    """The other side closed the pipe or sent something that is not a valid frame."""


def write_frame(fd, payload, deadline=None):
    header, body = memoryview(HEADER.pack(len(payload))), memoryview(payload)
    while header or body:  # writev: no copy of a big payload just to prepend 8 bytes
        _wait(fd, deadline, writing=True)
        try:
            written = os.writev(fd, [header, body] if header else [body])
        except OSError as error:
            raise WireError(f"pipe closed ({error.__class__.__name__})") from None
        used = min(written, len(header))
        header, body = header[used:], body[written - used:]


def _wait(fd, deadline, writing=False):
    """With a deadline, never block past it: a peer that stops reading or writing mid-frame
    (a hostile sandbox can) must not hang the grader."""
    if deadline is None:
        return
    left = deadline - time.monotonic()
    ready = select.select([], [fd], [], max(left, 0)) if writing else select.select([fd], [], [], max(left, 0))
    if not (ready[1] if writing else ready[0]):
        raise WireError("timed out in the middle of a frame")


def _read_exactly(fd, size, deadline=None):
    buffer = bytearray(size)
    view, filled = memoryview(buffer), 0
    while filled < size:
        _wait(fd, deadline)
        try:
            count = os.readv(fd, [view[filled:]])
        except OSError as error:
            raise WireError(f"pipe failed ({error.__class__.__name__})") from None
        if not count:
            raise WireError("pipe closed")
        filled += count
    return buffer


def read_frame(fd, limit=MAX_FRAME, deadline=None):
    (size,) = HEADER.unpack(bytes(_read_exactly(fd, HEADER.size, deadline)))
    if size > limit:
        raise WireError(f"frame of {size} bytes is over the {limit}-byte limit")
    return _read_exactly(fd, size, deadline)


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
# a reply with tensors is torch.save bytes. The first byte says which.
JSON, TORCH = b"J", b"T"


def dump_reply(message):
    import torch

    if not _has_tensor(message):
        try:
            return JSON + json.dumps(message).encode()
        except (TypeError, ValueError):
            pass  # not JSON-able: torch.save will say what it is, and the grader refuses it
    buffer = io.BytesIO()
    buffer.write(TORCH)
    torch.save(message, buffer, _use_new_zipfile_serialization=False)  # a third faster; same safe loader
    return buffer.getbuffer()


def _has_tensor(value):
    import torch

    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (list, tuple)):
        return any(_has_tensor(v) for v in value)
    if isinstance(value, dict):
        return any(_has_tensor(v) for v in value.values())
    return False


def load_reply(payload):
    """Decode a sandbox reply without running any of its code; raise WireError if not plain."""
    import torch

    kind, body = bytes(payload[:1]), memoryview(payload)[1:]
    try:
        if kind == JSON:
            message = json.loads(bytes(body))
        elif kind == TORCH:
            message = torch.load(io.BytesIO(body), weights_only=True, map_location="cpu")
        else:
            raise WireError("reply of an unknown kind")
    except WireError:
        raise
    except Exception as error:  # weights_only refuses classes, functions, subclasses
        raise WireError(f"reply is not plain data ({type(error).__name__})") from None
    check_plain(message)
    return message


MAX_NODES = 100_000  # values in one reply
MAX_ELEMENTS = 16 * 2**20  # tensor elements in one reply (the biggest real answer: 4.9 M)


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
