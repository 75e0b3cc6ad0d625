"""Frames between the grader and a sandbox: what arrives is exactly what was sent."""
import io
import random
import socket
import threading

import numpy
import pytest
import torch

from autograder import wire


def send_and_receive(message, buffer=None, dump=wire.dump_reply):
    """`message` through a socket pair, as a sandbox answers and the grader reads it."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        parts = dump(message)
        writer = threading.Thread(target=wire.write_frame, args=(theirs.fileno(), parts))
        writer.start()
        received = wire.load_reply(wire.read_reply_frame(ours.fileno(), buffer=buffer))
        writer.join()
    return received


def same(sent, got):
    if isinstance(sent, torch.Tensor):
        return type(got) is torch.Tensor and sent.dtype == got.dtype and torch.equal(sent, got)
    if isinstance(sent, (list, tuple)):
        return isinstance(got, (list, tuple)) and len(sent) == len(got) and all(map(same, sent, got))
    if isinstance(sent, dict):
        return sent.keys() == got.keys() and all(same(sent[k], got[k]) for k in sent)
    return sent == got


@pytest.mark.parametrize("message", [
    ("ok", "a string"),
    ("ok", torch.randn(2, 7, 12)),
    ("ok", torch.randn(20, 100, 768)),  # a big answer: its data is sent without a copy
    ("ok", {"items": [[torch.arange(4), torch.arange(1, 5)] for _ in range(50)], "length": 50}),
    ("ok", [torch.randn(300, 300), 1.5, None, torch.ones(3, dtype=torch.bool), torch.zeros(0),
            torch.randn(70_000).double()]),
], ids=["json", "small tensor", "big tensor", "many tensors", "mixed"])
@pytest.mark.parametrize("dump", [wire.dump_reply, wire.torch_reply], ids=["usual", "torch.save"])
def test_answers_arrive_unchanged(message, dump):
    assert same(message, send_and_receive(message, dump=dump))


def test_the_usual_answer_with_tensors_is_raw_and_keeps_its_containers():
    message = ("ok", {"pair": (torch.arange(3), [torch.ones(2, dtype=torch.bool), 2.5]),
                      "half": torch.randn(4).to(torch.bfloat16), "empty": torch.zeros(0, 3), "none": None})
    assert bytes(wire.dump_reply(message)[0][:1]) == wire.RAW
    got = send_and_receive(message)
    assert type(got) is tuple and type(got[1]["pair"]) is tuple and type(got[1]["pair"][1]) is list
    assert same(message, got) and got[1]["half"].dtype == torch.bfloat16 and got[1]["empty"].shape == (0, 3)


def test_what_raw_does_not_carry_goes_through_torch_save():
    complex_answer = ("ok", torch.randn(3, dtype=torch.complex64))
    assert bytes(wire.dump_reply(complex_answer)[0][:1]) == wire.TORCH
    assert same(complex_answer, send_and_receive(complex_answer))


def raw(outline, tensors, data=b""):
    import json

    head = json.dumps({"outline": outline, "tensors": tensors}).encode()
    return bytearray(wire.RAW + wire.RAW_HEAD.pack(len(head)) + head + data)


@pytest.mark.parametrize("forged, why", [
    (raw({"u": ["ok", {"t": 0}]}, [["float32", [2]]], bytes(4)), "does not match"),  # data cut short
    (raw({"u": ["ok", {"t": 0}]}, [["float32", [1]]], bytes(8)), "does not match"),  # data left over
    (raw([{"t": 0}, {"t": 0}], [["float32", [1]]], bytes(4)), "malformed"),  # one tensor twice
    (raw([], [["float32", [1]]], bytes(4)), "malformed"),  # data no answer holds
    (raw([{"t": 1}], [["float32", [1]]], bytes(4)), "malformed"),  # no such tensor
    (raw({"t": 0, "u": []}, [["float32", [1]]], bytes(4)), "malformed"),  # two tags in one
    (raw({"x": 1}, []), "malformed"),  # an unknown tag
    (raw([{"t": 0}], [["object", [1]]], bytes(8)), "cannot hold"),
    (raw([{"t": 0}], [["float32", [-1]]]), "cannot hold"),
    (raw([{"t": 0}], [["float32", [2**40, 2**40]]]), "cannot hold"),  # a dimension over the limit
    (raw([{"t": 0}], [["float32", [2**20] * 3]]), "too many tensor elements"),  # refused before allocating
    (raw([{"t": 0}], [["float32", [1] * 17]], bytes(4)), "cannot hold"),
    (bytearray(wire.RAW + wire.RAW_HEAD.pack(1000) + b"{}"), "cut short"),
    (bytearray(wire.RAW + b"\x00"), "cut short"),
    (raw({"d": {"x": 1}}, [], b"\x00"), "does not match"),
])
def test_a_malformed_raw_reply_is_refused(forged, why):
    with pytest.raises(wire.WireError, match=why):
        wire.load_reply(forged)


def test_raw_odd_but_honest_answers_arrive_or_fall_back():
    """More dimensions than RAW describes, a view with torch's negative bit, an outline over its
    limit: still sent (through torch.save where RAW cannot carry it)."""
    deep = torch.zeros([1] * 20)
    conjugated = torch.randn(3, dtype=torch.complex64).conj().imag  # a view with torch's negative bit
    many = ("ok", [random.Random(i).random() * 1e-300 for i in range(99_000)] + [torch.ones(2)])  # an outline over 2 MB
    for message in (("ok", deep), ("ok", conjugated), many):
        assert same(message, send_and_receive(message))
    assert bytes(wire.dump_reply(("ok", deep))[0][:1]) == wire.TORCH
    assert bytes(wire.dump_reply(many)[0][:1]) == wire.TORCH


def test_raw_bools_are_bools_and_empty_tensors_have_bounded_shapes():
    got = wire.load_reply(raw({"u": ["ok", {"t": 0}]}, [["bool", [3]]], bytes([0, 1, 7])))[1]
    assert got.tolist() == [False, True, True] and got.view(torch.uint8).tolist() == [0, 1, 1]
    odd = torch.tensor([0, 1, 7], dtype=torch.uint8).view(torch.bool)  # what a sandbox can send with torch.save
    got = wire.load_reply(bytearray(b"".join(bytes(p) for p in wire.torch_reply(("ok", odd)))))[1]
    assert got.view(torch.uint8).tolist() == [0, 1, 1]
    with pytest.raises(wire.WireError, match="cannot hold"):  # nothing to send, but a shape to blow up on
        wire.load_reply(raw([{"t": 0}], [["float32", [0, 2**40]]]))


def test_raw_tensors_never_share_the_reply_s_memory():
    payload = bytearray(b"".join(bytes(p) for p in wire.dump_reply(("ok", torch.ones(100)))))
    tensor = wire.load_reply(payload)[1]
    payload[-400:] = bytes(400)  # the reader reuses its buffer for the next reply
    assert bool(tensor.eq(1).all())


def test_a_reused_buffer_never_changes_tensors_already_received():
    buffer = bytearray()
    first = send_and_receive(("ok", torch.ones(1000, 300)), buffer)[1]  # over 1 MB: the big-reply reader
    second = send_and_receive(("ok", torch.zeros(1000, 300)), buffer)[1]
    assert len(buffer) >= 1_200_000  # both were read into the same memory
    assert bool(first.eq(1).all()) and bool(second.eq(0).all())


def test_big_tensor_data_is_sent_from_the_tensor_itself():
    tensor = torch.randn(1000, 1000)
    expected = tensor.clone()
    parts = wire.dump_reply(("ok", tensor))
    views = [p for p in parts if isinstance(p, memoryview)]
    address = numpy.frombuffer(views[0], dtype=numpy.uint8).ctypes.data if views else None
    assert len(views) == 1 and address == tensor.untyped_storage().data_ptr()
    del tensor  # the parts keep the tensor alive until they are sent
    assert torch.equal(torch.frombuffer(bytearray(views[0]), dtype=torch.float32).view(1000, 1000), expected)


def test_views_outside_the_answer_tensors_are_copied():
    parts = wire._Parts([torch.zeros(10)])
    elsewhere = bytearray(200_000)
    parts.write(memoryview(elsewhere))
    elsewhere[0] = 1
    assert all(not isinstance(p, memoryview) for p in parts.parts)
    assert parts.parts[-1] == wire.TORCH + bytes(200_000)  # a copy, made when it was written


def test_frames_of_more_buffers_than_one_writev_takes():
    pieces = [bytes([i % 256]) * (i % 7 + 1) for i in range(3 * wire.IOV_MAX)]
    ours, theirs = socket.socketpair()
    with ours, theirs:
        writer = threading.Thread(target=wire.write_frame, args=(theirs.fileno(), pieces))
        writer.start()
        received = bytes(wire.read_frame(ours.fileno()))
        writer.join()
    assert received == b"".join(pieces)


def test_the_reader_behaves_like_bytesio():
    data = bytes(random.Random(1).randrange(256) for _ in range(5000)).replace(b"\x07", b"\n")
    ours, reference = wire._Reader(bytearray(data)), io.BytesIO(data)
    steps = random.Random(2)
    for _ in range(400):
        action = steps.choice(["read", "readline", "readinto", "seek", "tell"])
        size = steps.choice([-1, 0, 1, 3, 100, 10_000])
        if action == "read":
            assert ours.read(size) == reference.read(size)
        elif action == "readline":  # lines are capped: pickles only have short ones
            assert ours.readline(size) == reference.readline(min(size, wire.MAX_LINE) if size >= 0 else wire.MAX_LINE)
        elif action == "readinto":
            a, b = bytearray(max(size, 0)), bytearray(max(size, 0))
            assert ours.readinto(a) == reference.readinto(b) and a == b
        elif action == "seek":
            whence = steps.choice([0, 1, 2])
            offset = steps.randrange(0, 6000) if whence == 0 else steps.randrange(-6000, 100)
            assert ours.seek(offset, whence) == reference.seek(offset, whence)
        assert ours.tell() == reference.tell()


def test_a_tensor_whose_data_is_not_in_the_reply_is_refused():
    """torch's legacy loader fills only the storages listed at the end of the file; a reply
    that lists none would hand the grader uninitialised memory, maybe a freed earlier answer."""
    import pickle
    import pickletools

    parts = wire.torch_reply(("ok", torch.arange(300_000.0)))
    honest = b"".join(bytes(p) for p in parts)
    stream = io.BytesIO(honest[1:])
    for _ in range(4):  # skip four pickles: magic number, protocol, system info, the message
        for _ in pickletools.genops(stream):
            pass
    forged = wire.TORCH + honest[1:1 + stream.tell()] + pickle.dumps([], protocol=2)
    with pytest.raises(wire.WireError, match="not in the reply"):
        wire.load_reply(bytearray(forged))
    big = wire.TORCH + honest[1:1 + stream.tell()] + pickle.dumps([], protocol=2) + bytes(2**21)
    with pytest.raises(wire.WireError, match="not in the reply"):
        wire.load_reply(bytearray(big))  # the same through the reader for big replies
    assert torch.equal(wire.load_reply(bytearray(honest))[1], torch.arange(300_000.0))


def test_pickled_data_is_bounded():
    """The unpickler is pure Python and torch's message for an unknown name is quadratic in
    its length: a small hostile reply must not be able to stall the grader."""
    import pickletools
    import time

    honest = b"".join(bytes(p) for p in wire.torch_reply(("ok", torch.zeros(2))))
    stream = io.BytesIO(honest[1:])
    for _ in range(3):  # magic number, protocol, system info
        for _ in pickletools.genops(stream):
            pass
    head = wire.TORCH + honest[1:1 + stream.tell()]
    long_name = head + b"\x80\x02ctorch\n" + b"a" * 80_000 + b"\n."
    many_opcodes = head + b"\x80\x02(" + b"N" * (8 * 2**20) + b"l."
    for forged in (long_name, many_opcodes):
        started = time.perf_counter()
        with pytest.raises(wire.WireError):
            wire.load_reply(bytearray(forged))
        assert time.perf_counter() - started < 5


HOSTILE_REPLY = """
import gc, json, socket, sys, threading, time, tracemalloc
import torch
from autograder import wire


def hostile(case):
    \"\"\"(the frame's start, an iterator of the rest) for one case.\"\"\"
    if case in ("big-json", "big-torch", "big-raw"):  # the header claims 60 MB; the body streams for as long as anyone reads
        head = wire.HEADER.pack(60 * 2**20) + {"big-json": b"J", "big-torch": b"T", "big-raw": b"R"}[case]
        def body():
            chunk = b"[]," * 20_000
            while True:
                yield chunk
        return head, body()
    if case == "deep-json":
        data = b"J" + b"[" * 1_500_000
    elif case == "wide-json":
        data = b"J[" + b"[]," * 690_000 + b"[]]"
    elif case == "wide-raw":  # an outline of 690,000 empty lists
        outline = b'{"outline": [' + b"[]," * 690_000 + b'[]], "tensors": []}'
        data = b"R" + wire.RAW_HEAD.pack(len(outline)) + outline
    elif case == "deep-raw":  # nested tags inside the node limit
        outline = b'{"outline": ' + b'{"u": [' * 30_000 + b"]}" * 30_000 + b', "tensors": []}'
        data = b"R" + wire.RAW_HEAD.pack(len(outline)) + outline
    else:  # deep-torch: nested lists holding a tensor, sent as a sandbox would
        nested = [torch.zeros(3)]
        for _ in range(400):
            nested = [nested]
        data = b"".join(bytes(p) for p in wire.torch_reply(("ok", nested)))
    return wire.HEADER.pack(len(data)) + data, iter(())


def measure(case):
    ours, theirs = socket.socketpair()
    head, body = hostile(case)

    def send():
        try:
            theirs.sendall(head)
            for chunk in body:
                theirs.sendall(chunk)
        except OSError:
            pass

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    time.sleep(0.2)
    gc.collect()
    tracemalloc.start()  # every Python object and buffer the grader makes while reading counts
    started = time.perf_counter()
    try:
        wire.load_reply(wire.read_reply_frame(ours.fileno(), deadline=time.monotonic() + 30, buffer=bytearray()))
        outcome = "accepted"
    except wire.WireError as error:
        outcome = str(error)
    seconds = time.perf_counter() - started
    grown = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    ours.close()  # the sender of an endless body stops
    theirs.close()
    sender.join(10)
    return {"outcome": outcome, "seconds": seconds, "grown_mb": grown}


print(json.dumps({case: measure(case) for case in sys.argv[1:]}))
"""
HOSTILE_CASES = ["big-json", "big-torch", "big-raw", "deep-json", "wide-json", "deep-torch", "wide-raw", "deep-raw"]


@pytest.fixture(scope="module")
def hostile_replies():
    """{case: what reading it cost}, each case read in turn by one fresh process (torch imported once)."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", HOSTILE_REPLY, *HOSTILE_CASES], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("case", HOSTILE_CASES)
def test_a_hostile_reply_costs_the_grader_little_memory_and_time(case, hostile_replies):
    """Bounded before parsing: 60 MB replies are refused from their header, and what fits
    the bound but is not plain data is refused without taking 100 MB or seconds.
    Measured as the peak of what the reading process allocates (tracemalloc)."""
    measured = hostile_replies[case]
    assert measured["outcome"] != "accepted"
    assert measured["grown_mb"] < 100, measured
    assert measured["seconds"] < 5, measured  # (generous: tracemalloc slows the parser)
    if case.startswith("big"):
        assert "over the" in measured["outcome"] and measured["grown_mb"] < 5, measured
    if case.endswith(("json", "raw")):  # at most about the size limit itself: values are counted before parsing
        assert measured["grown_mb"] < 3 * wire.MAX_JSON_BYTES / 2**20, measured


def test_a_zip_format_reply_is_refused():
    """torch.save's zip format would read an unbounded (and compressed) pickle: never accepted."""
    stream = io.BytesIO()
    torch.save(("ok", [[]] * 10), stream)  # the default format: zip
    assert stream.getvalue()[:4] == b"PK\x03\x04"
    with pytest.raises(wire.WireError, match="never sends"):
        wire.load_reply(bytearray(wire.TORCH + stream.getvalue()))


def test_a_reply_frame_is_refused_by_its_kind_before_its_body_is_read():
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(wire.HEADER.pack(wire.MAX_JSON_BYTES + 1) + b"J")
        with pytest.raises(wire.WireError, match="limit for its kind"):
            wire.read_reply_frame(ours.fileno())
        theirs.sendall(wire.HEADER.pack(10) + b"X")
        with pytest.raises(wire.WireError, match="unknown kind"):
            wire.read_reply_frame(ours.fileno())
    with pytest.raises(wire.WireError, match="over its size limit"):  # whoever read the frame
        wire.load_reply(bytearray(wire.JSON + b" " * wire.MAX_JSON_BYTES))
