"""TFRecord framing and the few protobuf messages of TensorFlow event files, by hand.

Both the legacy debugger's event files and TensorBoard's are sequences of records
    uint64 length | uint32 masked crc32c(length) | Event bytes | uint32 masked crc32c(data)
holding Event{wall_time=1, step=2, summary=5{value=1{tag=1, simple_value=2, histo=5,
tensor=8, metadata=9}}}. Decoding (for reading legacy stores) and encoding (for the
TensorBoard export) need only these fields, so no protobuf dependency is taken.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# -- crc32c (Castagnoli), table driven; records are small -----------------------------------


def _table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC_TABLE = _table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# The legacy writer puts the crc of these bytes in the footer when checksums are off.
_LEGACY_NO_CHECKSUM = masked_crc(b"0x12345678")


class RecordError(ValueError):
    """A record is truncated or its checksums do not match: it was not written whole."""


def frame(data: bytes) -> bytes:
    header = struct.pack("<Q", len(data))
    return (
        header + struct.pack("<I", masked_crc(header)) + data + struct.pack("<I", masked_crc(data))
    )


def unframe(record: bytes) -> bytes:
    """The payload of one whole record; RecordError unless it is complete and intact."""
    if len(record) < 16:
        raise RecordError("record shorter than its framing")
    header = record[:8]
    (length,) = struct.unpack("<Q", header)
    (header_crc,) = struct.unpack("<I", record[8:12])
    if header_crc != masked_crc(header):
        raise RecordError("record length checksum mismatch")
    if len(record) < 16 + length:
        raise RecordError(f"record truncated: {len(record) - 16} of {length} bytes")
    data = record[12 : 12 + length]
    (data_crc,) = struct.unpack("<I", record[12 + length : 16 + length])
    if data_crc not in (masked_crc(data), _LEGACY_NO_CHECKSUM):
        raise RecordError("record data checksum mismatch")
    return data


HEAD_BYTES = 21  # a record's framing (12 bytes) and its Event's wall_time field (1 + 8)


def record_head(head: bytes) -> tuple[int, float]:
    """(the record's length on disk, its Event's wall_time) from its first HEAD_BYTES: the
    writers put wall_time (field 1, a double) first. Reads no more than that however large
    the record; RecordError when the length's checksum fails or no wall_time opens it."""
    if len(head) < HEAD_BYTES:
        raise RecordError("record shorter than its framing and wall time")
    (length,) = struct.unpack("<Q", head[:8])
    if struct.unpack("<I", head[8:12])[0] != masked_crc(head[:8]):
        raise RecordError("record length checksum mismatch")
    (wall_time,) = struct.unpack("<d", head[13:21])
    if head[12] != 0x09 or not 0 < wall_time < 2**40:  # 0x09: field 1, 64-bit
        raise RecordError("the record does not open with its wall time")
    return 16 + length, wall_time


def records(blob: bytes) -> Iterator[bytes]:
    """Payloads of the whole records of a file's bytes; stops at a torn tail."""
    offset = 0
    while offset + 16 <= len(blob):
        (length,) = struct.unpack("<Q", blob[offset : offset + 8])
        end = offset + 16 + length
        if end > len(blob):
            return  # the writer is still appending this record
        yield unframe(blob[offset:end])
        offset = end


# -- protobuf wire format -------------------------------------------------------------------


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def fields(buf: bytes) -> dict[int, list[Any]]:
    """{field number: [values]}: ints for varints, bytes for length-delimited and fixed."""
    out: dict[int, list[Any]] = {}
    pos = 0
    value: int | bytes
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos : pos + 8], pos + 8
        elif wire == 2:
            size, pos = _varint(buf, pos)
            value, pos = buf[pos : pos + size], pos + size
        elif wire == 5:
            value, pos = buf[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        out.setdefault(number, []).append(value)
    return out


def _key(number: int, wire: int) -> bytes:
    return _encode_varint(number << 3 | wire)


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _bytes_field(number: int, data: bytes) -> bytes:
    return _key(number, 2) + _encode_varint(len(data)) + data


# -- TensorProto ----------------------------------------------------------------------------

# TensorFlow DataType enum -> numpy, and the TensorProto field holding typed values
_TF_DTYPES: dict[int, tuple[Any, int | None]] = {
    1: (np.float32, 5),  # DT_FLOAT, float_val
    2: (np.float64, 6),  # DT_DOUBLE, double_val
    3: (np.int32, 7),  # DT_INT32, int_val
    4: (np.uint8, 7),
    5: (np.int16, 7),
    6: (np.int8, 7),
    9: (np.int64, 10),  # DT_INT64, int64_val
    10: (np.bool_, 11),  # DT_BOOL, bool_val
    17: (np.uint16, 7),
    19: (np.float16, 13),  # DT_HALF, half_val (as uint16 bits in varints)
    22: (np.uint32, 16),
    23: (np.uint64, 17),
}


def decode_tensor(buf: bytes) -> np.ndarray:
    proto = fields(buf)
    dtype_id = proto.get(1, [1])[0]
    if dtype_id not in _TF_DTYPES:
        raise ValueError(f"unsupported tensor dtype {dtype_id}")
    dtype, typed_field = _TF_DTYPES[dtype_id]
    shape = []
    for dim in fields(proto[2][0]).get(2, []) if 2 in proto else []:
        shape.append(fields(dim).get(1, [0])[0])
    if 4 in proto:  # tensor_content: raw little-endian bytes
        array = np.frombuffer(proto[4][0], dtype=np.dtype(dtype).newbyteorder("<"))
        return array.reshape(shape).copy()
    values = _typed_values(proto.get(typed_field or 0, []), dtype, dtype_id)
    size = int(np.prod(shape)) if shape else 1
    if values.size == 1 and size > 1:  # a single value stands for all (TF convention)
        values = np.full(size, values[0], dtype=values.dtype)
    return values.astype(dtype).reshape(shape)


def _typed_values(raw: list[Any], dtype: Any, dtype_id: int) -> np.ndarray:
    items: list[Any] = []
    for value in raw:
        if isinstance(value, int):
            items.append(value)
        elif dtype is np.float32:
            items.extend(np.frombuffer(value, "<f4").tolist())  # packed or single fixed32
        elif dtype is np.float64:
            items.extend(np.frombuffer(value, "<f8").tolist())
        else:  # packed varints
            pos = 0
            while pos < len(value):
                number, pos = _varint(value, pos)
                items.append(number)
    if dtype_id == 19:  # half: the bits of each value
        return np.asarray(items, dtype=np.uint16).view(np.float16)
    if dtype in (np.int32, np.int64, np.int16, np.int8):  # two's complement varints
        return np.asarray([v - (1 << 64) if v >= 1 << 63 else v for v in items], dtype=np.int64)
    return np.asarray(items)


# -- Event ----------------------------------------------------------------------------------


@dataclass
class SummaryValue:
    tag: str
    tensor: np.ndarray | None = None
    simple_value: float | None = None
    histogram: dict[str, Any] | None = None  # min, max, num, sum, bucket_limit, bucket
    plugin_data: dict[str, str] = field(default_factory=dict)  # the legacy mode/mode_step


@dataclass
class Event:
    wall_time: float
    step: int
    values: list[SummaryValue]


def decode_event(data: bytes) -> Event:
    proto = fields(data)
    wall_time = struct.unpack("<d", proto[1][0])[0] if 1 in proto else 0.0
    step = proto.get(2, [0])[0]
    values = []
    for summary in proto.get(5, []):
        for raw in fields(summary).get(1, []):
            value = fields(raw)
            item = SummaryValue(tag=value.get(1, [b""])[0].decode())
            if 2 in value:
                item.simple_value = struct.unpack("<f", value[2][0])[0]
            if 8 in value:
                item.tensor = decode_tensor(value[8][0])
            if 5 in value:
                item.histogram = _decode_histogram(value[5][0])
            for meta in value.get(9, []):
                for entry in fields(meta).get(1, []):
                    pair = fields(entry)
                    key = pair.get(1, [b""])[0].decode()
                    item.plugin_data[key] = pair.get(2, [b""])[0].decode()
            values.append(item)
    return Event(wall_time=wall_time, step=step, values=values)


def _decode_histogram(buf: bytes) -> dict[str, Any]:
    proto = fields(buf)

    def double(number: int) -> float:
        return struct.unpack("<d", proto[number][0])[0] if number in proto else 0.0

    def doubles(number: int) -> list[float]:
        out: list[float] = []
        for raw in proto.get(number, []):
            out.extend(np.frombuffer(raw, "<f8").tolist())
        return out

    return {
        "min": double(1),
        "max": double(2),
        "num": double(3),
        "sum": double(4),
        "sum_squares": double(5),
        "bucket_limit": doubles(6),
        "bucket": doubles(7),
    }


def read_events(path: str | Path) -> Iterator[Event]:
    """Every whole event of a TensorBoard (or legacy debugger) event file, in order."""
    for record in records(Path(path).read_bytes()):
        yield decode_event(record)


def encode_scalar_event(step: int, wall_time: float, tag: str, value: float) -> bytes:
    summary_value = _bytes_field(1, tag.encode()) + _key(2, 5) + struct.pack("<f", value)
    return _event(step, wall_time, summary_value)


def encode_histogram_event(step: int, wall_time: float, tag: str, values: np.ndarray) -> bytes:
    """A TensorBoard HistogramProto{min=1, max=2, num=3, sum=4, sum_squares=5,
    bucket_limit=6, bucket=7} of `values` (30 buckets over their finite range)."""
    data = np.asarray(values, dtype=np.float64).reshape(-1)
    data = data[np.isfinite(data)]
    if data.size == 0:
        data = np.zeros(1)
    counts, edges = np.histogram(data, bins=30)
    histo = b"".join(
        [
            _key(1, 1) + struct.pack("<d", float(data.min())),
            _key(2, 1) + struct.pack("<d", float(data.max())),
            _key(3, 1) + struct.pack("<d", float(data.size)),
            _key(4, 1) + struct.pack("<d", float(data.sum())),
            _key(5, 1) + struct.pack("<d", float((data * data).sum())),
            _bytes_field(6, struct.pack(f"<{len(edges) - 1}d", *edges[1:])),
            _bytes_field(7, struct.pack(f"<{len(counts)}d", *counts.astype(np.float64))),
        ]
    )
    return _event(step, wall_time, _bytes_field(1, tag.encode()) + _bytes_field(5, histo))


def _event(step: int, wall_time: float, summary_value: bytes) -> bytes:
    summary = _bytes_field(1, summary_value)
    return (
        _key(1, 1)
        + struct.pack("<d", wall_time)
        + _key(2, 0)
        + _encode_varint(step)
        + _bytes_field(5, summary)
    )


def file_version_event(wall_time: float) -> bytes:
    """The first record of a TensorBoard event file: Event{file_version=3: "brain.Event:2"}."""
    return _key(1, 1) + struct.pack("<d", wall_time) + _bytes_field(3, b"brain.Event:2")
