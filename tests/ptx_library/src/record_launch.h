// Recording a library's launch on the CPU, for tests/ptx_library/build.py: a cuTensorMapEncodeTiled that
// records its arguments (and tags the map's bytes so that the map's offset in the Params struct can be found),
// and print_launch, which prints the launch description as JSON. There is no driver here: the library is built
// with CUTLASS_ENABLE_DIRECT_CUDA_DRIVER_CALL, so its host code calls the function below.
#pragma once
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#include <cuda.h>

namespace record {

struct TensorMap {
  int dtype, rank, interleave, swizzle, l2, oob;
  unsigned long long address, dims[5], strides[4];
  unsigned box[5], elem[5];
};
inline std::vector<TensorMap>& maps() { static std::vector<TensorMap> m; return m; }
constexpr unsigned long long kTag = 0x7e55e7a7e55e7a00ull;  // written in bytes 0-7 of the k-th map: kTag + k

struct Array {
  const char* name;
  unsigned long long address;  // the fake device address the host code was given
  std::string spec;            // TYPE[D0,...]=INIT, as tessera-run's --arg takes it
};

// Prints the launch description tessera-run's `--arg struct:FILE` reads (tessera/interpreters/ptx/params.py):
// the launch geometry, the Params bytes (hex), the tensors, and the fields: a pointer wherever the bytes hold
// an array's address (8-aligned), a tensor map wherever a recorded map lies (its cuTensorMapEncodeTiled
// arguments, its globalAddress as a tensor and a byte offset).
inline void print_launch(dim3 grid, dim3 block, dim3 cluster, size_t smem, const void* params, size_t size,
                         const std::vector<Array>& arrays) {
  const unsigned char* bytes = static_cast<const unsigned char*>(params);
  std::printf("{\"grid\": [%u, %u, %u], \"block\": [%u, %u, %u], \"cluster\": [%u, %u, %u], \"shared_bytes\": %zu,\n",
              grid.x, grid.y, grid.z, block.x, block.y, block.z, cluster.x, cluster.y, cluster.z, smem);
  std::printf(" \"tensors\": {");
  for (size_t i = 0; i < arrays.size(); ++i)
    std::printf("%s\"%s\": \"%s\"", i ? ", " : "", arrays[i].name, arrays[i].spec.c_str());
  std::printf("},\n \"params\": \"");
  for (size_t i = 0; i < size; ++i) std::printf("%02x", bytes[i]);
  std::printf("\",\n \"fields\": [");
  bool first = true;
  std::vector<bool> in_map(size, false);
  for (size_t i = 0; i < maps().size(); ++i) {
    const TensorMap& r = maps()[i];
    long offset = -1;
    for (size_t o = 0; o + 128 <= size; o += 64) {
      unsigned long long v;
      std::memcpy(&v, bytes + o, 8);
      if (v == kTag + i) offset = static_cast<long>(o);
    }
    if (offset < 0) continue;  // a map the host code made but did not keep in these Params
    const Array* tensor = nullptr;
    for (const Array& a : arrays)
      if (a.address <= r.address && (!tensor || a.address > tensor->address)) tensor = &a;
    for (int k = 0; k < 128; ++k) in_map[offset + k] = true;
    std::printf("%s\n  {\"offset\": %ld, \"kind\": \"tensormap\", \"tensor\": \"%s\", \"tensor_offset\": %llu, "
                "\"dtype\": %d, \"dims\": [", first ? "" : ",", offset, tensor ? tensor->name : "?",
                tensor ? r.address - tensor->address : 0ull, r.dtype);
    first = false;
    for (int d = 0; d < r.rank; ++d) std::printf("%s%llu", d ? ", " : "", r.dims[d]);
    std::printf("], \"strides\": [");
    for (int d = 0; d + 1 < r.rank; ++d) std::printf("%s%llu", d ? ", " : "", r.strides[d]);
    std::printf("], \"box\": [");
    for (int d = 0; d < r.rank; ++d) std::printf("%s%u", d ? ", " : "", r.box[d]);
    std::printf("], \"element_strides\": [");
    for (int d = 0; d < r.rank; ++d) std::printf("%s%u", d ? ", " : "", r.elem[d]);
    std::printf("], \"interleave\": %d, \"swizzle\": %d, \"l2_promotion\": %d, \"oob_fill\": %d}", r.interleave,
                r.swizzle, r.l2, r.oob);
  }
  for (size_t o = 0; o + 8 <= size; o += 8) {
    unsigned long long v;
    std::memcpy(&v, bytes + o, 8);
    for (const Array& a : arrays)
      if (v == a.address && !in_map[o]) {
        std::printf("%s\n  {\"offset\": %zu, \"kind\": \"pointer\", \"tensor\": \"%s\"}", first ? "" : ",", o, a.name);
        first = false;
      }
  }
  std::printf("]}\n");
}

}  // namespace record

extern "C" inline CUresult cuTensorMapEncodeTiled(CUtensorMap* map, CUtensorMapDataType dtype, cuuint32_t rank,
                                                  void* address, const cuuint64_t* dims, const cuuint64_t* strides,
                                                  const cuuint32_t* box, const cuuint32_t* elem,
                                                  CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                                  CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
  record::TensorMap r{};
  r.dtype = dtype; r.rank = static_cast<int>(rank); r.interleave = interleave; r.swizzle = swizzle; r.l2 = l2;
  r.oob = oob; r.address = reinterpret_cast<unsigned long long>(address);
  for (unsigned i = 0; i < rank; ++i) { r.dims[i] = dims[i]; r.box[i] = box[i]; r.elem[i] = elem[i]; }
  for (unsigned i = 0; i + 1 < rank; ++i) r.strides[i] = strides[i];
  std::memset(map, 0, sizeof(CUtensorMap));
  unsigned long long tag = record::kTag + record::maps().size();
  std::memcpy(map, &tag, 8);
  record::maps().push_back(r);
  return CUDA_SUCCESS;
}
