"""By-value parameter structs in the PTX executor (`ParamStruct`, launch descriptions, `tessera-run --arg
struct:FILE`), and tensor maps with every cuTensorMapEncodeTiled argument (`TensorMapArg.encode`): a kernel
that takes one `.param .align 128 .b8 k_param_0[N]`, reads a scalar and a pointer from it with ld.param, and
reaches a tensor map inside it by the generic address of a byte of the parameter (cvta.param + add), as
CUTLASS's and FlashAttention-3's kernels do."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

import tessera.ptx
from tessera.interpreters.ptx import PtxExecutionError, ParamStruct, TensorMapArg, launch
from tessera.interpreters.ptx.cli import main as tessera_run_ptx
from tessera.sm90 import facts

STRUCT_BYTES = 384
MAP_OFFSET = 128
# Params { u32 rows_to_copy; f32* out (offset 8); ...; CUtensorMap map (offset 128); ... }
STRUCT_KERNEL = f"""
.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .align 128 .b8 k_param_0[{STRUCT_BYTES}])
{{
    .reg .b32 %r<16>;
    .reg .b64 %rd<16>;
    .reg .pred %p<4>;
    .shared .align 1024 .b8 tile[2048];
    .shared .align 8 .b64 bar;
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, bar;
    setp.eq.u32 %p1, %r0, 0;
    @%p1 mbarrier.init.shared::cta.b64 [%r1], 1;
    bar.sync 0;
    mov.u64 %rd1, k_param_0;
    cvta.param.u64 %rd2, %rd1;
    add.s64 %rd3, %rd2, {MAP_OFFSET};
    mov.u32 %r2, tile;
    @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd4, [%r1], 2048;
    @%p1 cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r2], [%rd3, {{0, 0}}], [%r1];
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r1], 0;
    @!%p2 bra WAIT;
    ld.param.u32 %r3, [k_param_0];
    ld.param.u64 %rd5, [k_param_0+8];
    cvta.to.global.u64 %rd5, %rd5;
    mul.lo.u32 %r4, %r3, 32;
    setp.ge.u32 %p3, %r0, %r4;
    @%p3 bra END;
    shl.b32 %r5, %r0, 2;
    add.u32 %r6, %r2, %r5;
    ld.shared.b32 %r7, [%r6];
    mul.wide.u32 %rd6, %r0, 4;
    add.s64 %rd7, %rd5, %rd6;
    st.global.b32 [%rd7], %r7;
END:
    ret;
}}
"""


def struct_bytes(rows: int) -> bytes:
    data = bytearray(STRUCT_BYTES)
    data[0:4] = rows.to_bytes(4, "little")
    data[4:8] = b"\xaa\xbb\xcc\xdd"  # host bytes the kernel does not read stay as given
    return bytes(data)


def encode_rows(x: np.ndarray, box_rows: int, **kw) -> TensorMapArg:
    """cuTensorMapEncodeTiled's arguments for a row-major f32 matrix x, box 32 columns x box_rows rows."""
    return TensorMapArg.encode(x, facts.TensorMapDataType.FLOAT32, (x.shape[1], x.shape[0]), (x.strides[0],),
                               (32, box_rows), **kw)


def test_a_struct_with_a_pointer_and_a_tensor_map_inside_launches_and_updates_arrays_in_place():
    x = np.arange(16 * 32, dtype=np.float32).reshape(16, 32)
    out = np.zeros(512, np.float32)
    struct = ParamStruct(struct_bytes(12), {8: out, MAP_OFFSET: encode_rows(x, 16)})
    results = tessera.ptx.launch(STRUCT_KERNEL, "k", 1, 512, [struct])
    np.testing.assert_array_equal(out[:12 * 32], x.reshape(-1)[:12 * 32])  # rows_to_copy = 12
    assert (out[12 * 32:] == 0).all()
    assert results == [{8: out, MAP_OFFSET: x}] and results[0][8] is out


def test_element_strides_and_nan_oob_fill_follow_the_encode_arguments():
    """elementStrides (1, 2): every other row of the box; FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA: rows past the
    tensor read as NaN. The box spans 32 rows of a 20-row tensor: 16 rows land, 10 real and 6 NaN."""
    x = np.arange(20 * 32, dtype=np.float32).reshape(20, 32)
    out = np.zeros(512, np.float32)
    tensor_map = encode_rows(x, 32, element_strides=(1, 2), oob_fill=facts.TensorMapFloatOOBFill.NAN_REQUEST_ZERO_FMA)
    assert tensor_map.spec.box_bytes == 2048
    launch(STRUCT_KERNEL, "k", 1, 512, [ParamStruct(struct_bytes(16), {8: out, MAP_OFFSET: tensor_map})])
    rows = out.reshape(16, 32)
    np.testing.assert_array_equal(rows[:10], x[0:20:2])
    assert np.isnan(rows[10:]).all()


def test_interleaved_maps_are_refused_by_name():
    x = np.zeros((4, 4, 32), np.float32)
    interleaved = TensorMapArg.encode(x, facts.TensorMapDataType.FLOAT32, (32, 4, 4), (128, 512), (32, 4, 4),
                                      interleave=facts.TensorMapInterleave.B16)
    with pytest.raises(PtxExecutionError, match="interleave B16 are not supported"):
        launch(STRUCT_KERNEL, "k", 1, 512, [ParamStruct(struct_bytes(1), {8: np.zeros(1, np.float32),
                                                                           MAP_OFFSET: interleaved})])


@pytest.mark.parametrize("fields,message", [
    ({64 + 8: "map"}, "tensor map at offset 72 is not 64-byte aligned"),
    ({12: "out"}, "pointer at offset 12 is not 8-byte aligned"),
    ({320: "map"}, "128-byte field at offset 320 is outside the 384-byte struct"),
    ({128: "map", 192: "out"}, "fields at offsets 128 and 192 overlap"),
])
def test_bad_struct_fields_are_refused_before_the_run(fields, message):
    x = np.zeros((16, 32), np.float32)
    made = {o: encode_rows(x, 16) if v == "map" else np.zeros(4, np.float32) for o, v in fields.items()}
    with pytest.raises(ValueError, match=message):
        launch(STRUCT_KERNEL, "k", 1, 512, [ParamStruct(struct_bytes(1), made)])


def test_a_struct_of_the_wrong_size_is_refused():
    with pytest.raises(ValueError, match=r"a ParamStruct of 100 bytes for the parameter .b8\[384\]"):
        launch(STRUCT_KERNEL, "k", 1, 512, [ParamStruct(bytes(100), {})])


def test_encode_checks_what_the_driver_checks():
    x = np.zeros((16, 32), np.float32)
    with pytest.raises(ValueError, match="elementStrides must be in"):
        launch(STRUCT_KERNEL, "k", 1, 512, [ParamStruct(struct_bytes(1), {
            8: np.zeros(4, np.float32), MAP_OFFSET: encode_rows(x, 16, element_strides=(1, 9))})])


def description(rows: int) -> dict:
    return {
        "params": struct_bytes(rows).hex(), "grid": [1, 1, 1], "block": [512, 1, 1], "shared_bytes": 0,
        "tensors": {"x": "f32[16,32]=arange", "out": "f32[512]=zeros"},
        "fields": [{"offset": 8, "kind": "pointer", "tensor": "out"},
                   {"offset": MAP_OFFSET, "kind": "tensormap", "tensor": "x", "tensor_offset": 0,
                    "dtype": int(facts.TensorMapDataType.FLOAT32), "dims": [32, 16], "strides": [128],
                    "box": [32, 16], "element_strides": [1, 1], "interleave": 0, "swizzle": 0,
                    "l2_promotion": 2, "oob_fill": 0}]}


def test_tessera_run_takes_a_struct_from_a_launch_description(tmp_path, capsys):
    (tmp_path / "k.ptx").write_text(STRUCT_KERNEL)
    (tmp_path / "launch.json").write_text(json.dumps(description(5)))
    code = tessera_run_ptx([str(tmp_path / "k.ptx"), "--arg", f"struct:{tmp_path / 'launch.json'}",
                            "--save", str(tmp_path / "out")])
    assert code == 0, capsys.readouterr().err
    out = np.load(tmp_path / "out" / "out.npy")
    np.testing.assert_array_equal(out[:160], np.arange(160))
    assert (out[160:] == 0).all()
    assert "grid (1, 1, 1), block (512, 1, 1)" in capsys.readouterr().out


@pytest.mark.parametrize("change,message", [
    (lambda d: d["fields"].append({"offset": 16, "kind": "pointer", "tensor": "y"}), "no tensor named 'y'"),
    (lambda d: d["fields"][1].pop("dtype"), "a tensor map needs 'dtype'"),
    (lambda d: d["fields"][0].update(kind="array"), '"kind" must be "pointer" or "tensormap"'),
    (lambda d: d.update(params="xyz"), "must be the struct's bytes as a hex string"),
    (lambda d: d["tensors"].update(x="f32[16,32]"), "tensor 'x' must be TYPE"),
])
def test_tessera_run_reports_a_bad_description_in_one_line(tmp_path, capsys, change, message):
    broken = description(1)
    change(broken)
    (tmp_path / "k.ptx").write_text(STRUCT_KERNEL)
    (tmp_path / "launch.json").write_text(json.dumps(broken))
    assert tessera_run_ptx([str(tmp_path / "k.ptx"), "--arg", f"struct:{tmp_path / 'launch.json'}"]) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("type_name", ["e4m3", "e5m2"])
def test_8_bit_float_arrays_are_made_from_floats(type_name):
    """FP8 tensors of a launch description (FA3's and CUTLASS's FP8 kernels): `random` is standard normal rounded
    to the type, not the integers 0..99 of integer types."""
    from tessera.interpreters.ptx.cli import _array

    values = _array(f"{type_name}[64]=random", np.random.default_rng(0))
    assert values.dtype == np.dtype(getattr(ml_dtypes, "float8_e4m3fn" if type_name == "e4m3" else "float8_e5m2"))
    wide = values.astype(np.float32)
    assert np.isfinite(wide).all() and (wide < 0).any() and (np.abs(wide) < 1).any()
