// GgufFile: a GGUF file (llama.cpp's single-file model format, versions 2 and 3), memory-mapped read-only.
//
// Layout (little-endian): "GGUF", u32 version, u64 tensor_count, u64 kv_count; kv_count metadata entries
// (string key, u32 value type, value); tensor_count tensor infos (string name, u32 n_dims, u64 ne[n_dims],
// u32 ggml type, u64 offset); padding to `general.alignment` (default 32); the data section. A string is a
// u64 length then bytes; an array is a u32 element type, a u64 count, then the elements. Tensor offsets
// are relative to the data section and multiples of the alignment. ne[0] is the contiguous dimension, so
// a tensor with ne = [K, N] is the row-major matrix [N, K] (shape() reverses the dims).
//
// open() validates everything without touching tensor data: magic, version (2 or 3; v1 and big-endian files
// are rejected), counts against the file size (an absurd count fails before any allocation), every string
// and array within the file, value types known, keys and tensor names unique, n_dims in [1, 4], dims > 0
// and without overflow, tensor types known (quant::gguf_type_from_id), ne[0] a multiple of the type's block,
// offsets aligned, data in bounds. Errors are DATA_LOSS (truncated or corrupt) or UNIMPLEMENTED (unknown
// type, unsupported version) and name the file, then the tensor or key, then the field:
//   "m.gguf: tensor 'blk.0.attn_q.weight': field 'type': unknown GGUF tensor type 99"
//
// Tensor data pointers stay valid while the GgufFile lives; the mapping is PROT_READ (never write).
//
// Slices (a tensor-parallel rank's part) read only their own bytes: tensor_rows() describes rows [r0, r1)
// of the outermost row-major dim in place (no copy; only those rows' pages are ever read from disk);
// read_cols() copies whole blocks of columns of a 2-D tensor row by row.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "xinfer/core/status.h"
#include "xinfer/core/tensor.h"
#include "xinfer/quant/gguf_types.h"

namespace xinfer::model {

enum class GgufValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12
};
const char* gguf_value_type_name(GgufValueType t);  // "u32", "string", "array", ...

// One metadata value. Scalars: integers (and bool) in `i` (u64 above INT64_MAX in `u` too), floats in `f`,
// strings in `s`. Arrays: elem_type, and the elements in ints / floats / strings / items (nested arrays).
struct GgufValue {
  GgufValueType type = GgufValueType::kU8;
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  std::string s;
  GgufValueType elem_type = GgufValueType::kU8;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  std::vector<GgufValue> items;
  bool is_integer() const;  // an integer type or bool
  bool is_float() const { return type == GgufValueType::kF32 || type == GgufValueType::kF64; }
  size_t array_size() const;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // GGUF order: ne[0] contiguous
  quant::GgufType type = quant::GgufType::kF32;
  uint64_t offset = 0;  // from the start of the data section
  size_t bytes = 0;     // rows * row_bytes(ne[0])
  const uint8_t* data = nullptr;
  Shape shape() const;  // row-major: reversed ne
  int64_t numel() const;
};

class GgufFile;
Result<GgufFile> parse_gguf(const void* data, size_t size, const std::string& file_name);

class GgufFile {
 public:
  static Result<GgufFile> open(const std::string& path);
  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  const std::string& path() const;
  std::string file_name() const;  // path without directories (for messages)
  uint32_t version() const;
  uint64_t alignment() const;

  // ---- metadata ----
  const std::map<std::string, GgufValue>& metadata() const;
  const GgufValue* find(const std::string& key) const;
  // Typed getters: NOT_FOUND "FILE: missing metadata key 'K'"; INVALID_ARGUMENT "FILE: metadata key 'K':
  // expected an integer, found string" (integers accept every integer type; floats accept f32/f64 and ints).
  Result<int64_t> get_int(const std::string& key) const;
  Result<double> get_float(const std::string& key) const;
  Result<bool> get_bool(const std::string& key) const;
  Result<std::string> get_string(const std::string& key) const;
  // Arrays: the element type must match (ints: any integer type; floats: f32/f64).
  Result<const std::vector<std::string>*> get_string_array(const std::string& key) const;
  Result<const std::vector<int64_t>*> get_int_array(const std::string& key) const;
  Result<const std::vector<double>*> get_float_array(const std::string& key) const;
  // The same with a default when the key is absent (a present key of the wrong type is still an error).
  Result<int64_t> get_int_or(const std::string& key, int64_t fallback) const;
  Result<double> get_float_or(const std::string& key, double fallback) const;
  Result<bool> get_bool_or(const std::string& key, bool fallback) const;

  // ---- tensors ----
  const std::vector<GgufTensorInfo>& tensors() const;  // in file order
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  // NOT_FOUND "FILE: tensor 'x' not found (N tensors)"; INVALID_ARGUMENT "FILE: tensor 'x': field 'shape':
  // expected [576, 1536], found [1536, 576]" (row-major shapes).
  Result<const GgufTensorInfo*> tensor(const std::string& name, const Shape& expected) const;
  // Rows [r0, r1) of the outermost row-major dim (ne[n_dims - 1]) of tensor `name`: an info whose ne, bytes
  // and data describe just those rows (offset stays the whole tensor's). NOT_FOUND as tensor();
  // INVALID_ARGUMENT "FILE: tensor 'x': field 'rows': [r0, r1) outside [0, N)".
  Result<GgufTensorInfo> tensor_rows(const std::string& name, int64_t r0, int64_t r1) const;
  // Columns [c0, c1) of the 2-D tensor `name` (row-major [N, K], K = ne[0]) as raw bytes [N, row bytes of the
  // slice] (kU8): c0 and c1 must fall on block boundaries of its type (or c1 == K), INVALID_ARGUMENT
  // "FILE: tensor 'x': field 'cols': ..." otherwise.
  Result<HostTensor> read_cols(const std::string& name, int64_t c0, int64_t c1) const;

 private:
  friend Result<GgufFile> parse_gguf(const void* data, size_t size, const std::string& file_name);
  struct Impl;
  explicit GgufFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Parses a GGUF image in memory (what open() does after mapping); `file_name` labels errors. The returned
// file's tensor pointers point into `data`, which must outlive it. Used by tests.
Result<GgufFile> parse_gguf(const void* data, size_t size, const std::string& file_name);

}  // namespace xinfer::model
