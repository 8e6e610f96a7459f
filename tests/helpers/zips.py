"""Zip archives written byte by byte, hostile ones included, for the encoder-zip tests.

``zipfile`` writes only well-formed archives (it recomputes sizes and clears flags), so the
hostile cases (a declared size the data does not have, an encryption flag, a symbolic link,
an absolute name) are laid out here from the format's records: a local header and the data
of each entry, its central-directory entry, the end record. A declared size of 4 GiB or
more goes into a ZIP64 extra field of the central directory; the data written stays tiny.
"""

from __future__ import annotations

import stat
import struct
import zlib
from dataclasses import dataclass

LOCAL = struct.Struct("<4s5H3L2H")
CENTRAL = struct.Struct("<4s6H3L5H2L")
END = struct.Struct("<4s4H2LH")

TOP = "ggml-tiny.en-encoder.mlmodelc"
"""The top-level folder of the encoder archives below, as upstream names it."""


@dataclass(frozen=True)
class Entry:
    """One archive entry: its name, its data and what the central directory says of it."""

    name: str
    data: bytes = b""
    mode: int = stat.S_IFREG | 0o644
    declared: int | None = None  # uncompressed size declared; default len(data)
    flags: int = 0
    deflate: bool = False


def folder(name: str) -> Entry:
    """A folder entry (``name/``)."""
    return Entry(name.rstrip("/") + "/", mode=stat.S_IFDIR | 0o755)


def zip_bytes(entries: list[Entry]) -> bytes:
    """Lay out ``entries`` as a zip archive, sizes and flags exactly as given."""
    out, central = bytearray(), bytearray()
    for e in entries:
        name = e.name.encode("utf-8")
        data = zlib.compress(e.data)[2:-4] if e.deflate else e.data
        size = len(e.data) if e.declared is None else e.declared
        big = size >= 0xFFFFFFFF
        method = 8 if e.deflate else 0
        crc = zlib.crc32(e.data)
        offset = len(out)
        out += LOCAL.pack(b"PK\x03\x04", 45 if big else 20, e.flags, method, 0, 0x21, crc,
                          len(data), 0xFFFFFFFF if big else size, len(name), 0) + name + data
        extra = struct.pack("<2HQ", 1, 8, size) if big else b""
        central += CENTRAL.pack(b"PK\x01\x02", (3 << 8) | 45, 45 if big else 20, e.flags,
                                method, 0, 0x21, crc, len(data),
                                0xFFFFFFFF if big else size, len(name), len(extra), 0, 0, 0,
                                e.mode << 16, offset) + name + extra
    n = len(entries)
    return bytes(out + central + END.pack(b"PK\x05\x06", 0, 0, n, n, len(central), len(out),
                                          0))


MODEL_MIL = (
    b'program(1.0)\n{\n    func main<ios16>(tensor<fp32, [1, 4]> x) {\n'
    b'            tensor<fp32, [4]> w = const()[name = tensor<string, []>("w"), '
    b'val = tensor<fp32, [4]>(BLOBFILE(path = tensor<string, []>('
    b'"@model_path/weights/weight.bin"), offset = tensor<uint64, []>(64)))];\n'
    b'            tensor<fp32, [1, 4]> y = mul(x = x, y = w)[name = tensor<string, []>("y")];\n'
    b'        } -> (y);\n}\n')
"""A ``model.mil`` that parses, naming one weight in ``weights/weight.bin``."""


def encoder_entries(top: str = TOP, weights: bytes = b"\x01\x02" * 512) -> list[Entry]:
    """The entries of a well-formed compiled encoder's archive (contents are placeholders,
    but for a ``model.mil`` that parses)."""
    return [folder(top), Entry(f"{top}/coremldata.bin", b"\x00" * 16),
            Entry(f"{top}/metadata.json", b"[{}]"), Entry(f"{top}/model.mil", MODEL_MIL),
            folder(f"{top}/weights"), Entry(f"{top}/weights/weight.bin", weights, deflate=True),
            folder(f"{top}/analytics"), Entry(f"{top}/analytics/coremldata.bin", b"\x00" * 8)]


def hostile_archives() -> dict[str, bytes]:
    """Name -> an archive the encoder-zip check must refuse, with a well-formed encoder
    beside each hostile entry (so the hostile entry alone is what is refused)."""
    good = encoder_entries()
    link = Entry(f"{TOP}/weights/link.bin", b"/etc/passwd", mode=stat.S_IFLNK | 0o777)
    many = [Entry(f"{TOP}/analytics/n{i:05d}", b"") for i in range(10_000)]
    return {
        "zip-slip": zip_bytes(good + [Entry("../x", b"escaped")]),
        "absolute path": zip_bytes(good + [Entry("/tmp/x", b"escaped")]),
        "symlink": zip_bytes(good + [link]),
        "10,000 entries": zip_bytes(good + many),
        "4 GiB declared": zip_bytes(good[:-1] + [Entry(f"{TOP}/weights/big.bin", b"\x00" * 64,
                                                       declared=4 << 30)] + good[-1:]),
        "nested folder escape": zip_bytes(good + [Entry(f"{TOP}/weights/../../../x", b"e")]),
    }


__all__ = ["Entry", "folder", "zip_bytes", "encoder_entries", "hostile_archives", "TOP"]
