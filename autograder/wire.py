"""Frames between the grader and a sandbox, and what may cross them.

Both sides speak length-prefixed frames over pipes. The grader sends requests
pickled (it is trusted; the sandbox may read anything it says). The sandbox
answers with `torch.save` bytes, and the grader reads them only with
`torch.load(weights_only=True)` and then `check_plain`: no code runs on the
trusted side, and only base-class tensors, numbers, strings, lists and dicts
get through.
"""
import io
import os
import pickle
import struct

import torch

HEADER = struct.Struct(">Q")
MAX_FRAME = 64 * 2**20  # a reply bigger than this is a broken or hostile sandbox


class WireError(Exception):
    """The other side closed the pipe or sent something that is not a valid frame."""


def write_frame(fd, payload):
    header, body = memoryview(HEADER.pack(len(payload))), memoryview(payload)
    while header or body:  # writev: no copy of a big payload just to prepend 8 bytes
        try:
            written = os.writev(fd, [header, body] if header else [body])
        except OSError as error:
            raise WireError(f"pipe closed ({error.__class__.__name__})") from None
        used = min(written, len(header))
        header, body = header[used:], body[written - used:]


def _read_exactly(fd, size):
    buffer = bytearray(size)
    view, filled = memoryview(buffer), 0
    while filled < size:
        try:
            count = os.readv(fd, [view[filled:]])
        except OSError as error:
            raise WireError(f"pipe failed ({error.__class__.__name__})") from None
        if not count:
            raise WireError("pipe closed")
        filled += count
    return buffer


def read_frame(fd, limit=MAX_FRAME):
    (size,) = HEADER.unpack(bytes(_read_exactly(fd, HEADER.size)))
    if size > limit:
        raise WireError(f"frame of {size} bytes is over the {limit}-byte limit")
    return _read_exactly(fd, size)


# -- requests: grader -> sandbox ----------------------------------------------
def dump_request(message):
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


def load_request(payload):
    return pickle.loads(payload)  # only ever called inside the sandbox, on the grader's bytes


# -- replies: sandbox -> grader -----------------------------------------------
def dump_reply(message):
    buffer = io.BytesIO()
    torch.save(message, buffer, _use_new_zipfile_serialization=False)  # a third faster; same safe loader
    return buffer.getvalue()


def load_reply(payload):
    """Decode a sandbox reply without running any of its code; raise WireError if not plain."""
    try:
        message = torch.load(io.BytesIO(payload), weights_only=True, map_location="cpu")
    except Exception as error:  # weights_only refuses classes, functions, subclasses
        raise WireError(f"reply is not plain data ({type(error).__name__})") from None
    check_plain(message)
    return message


def check_plain(value, depth=0):
    """Accept only exact base types; a Tensor subclass or odd object fails here."""
    if depth > 20:
        raise WireError("reply nested too deeply")
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return
    if kind is float:
        return  # NaN/inf are data; the checks judge them
    if kind is torch.Tensor:
        if value.layout is not torch.strided or value.device.type != "cpu" or value.is_quantized:
            raise WireError("reply holds a tensor that is not a plain CPU tensor")
        return
    if kind in (list, tuple):
        for item in value:
            check_plain(item, depth + 1)
        return
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise WireError("reply holds a dict with non-string keys")
            check_plain(item, depth + 1)
        return
    raise WireError(f"reply holds a {kind.__name__}, which is not plain data")

