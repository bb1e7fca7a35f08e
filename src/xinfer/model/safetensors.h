// Safetensors weights of a model directory, memory-mapped read-only.
//
// File format (https://github.com/huggingface/safetensors): 8-byte little-endian header length N, then N bytes
// of JSON {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the tensor data; offsets are relative to the start of the data section (byte 8 + N).
//
// A model directory holds either one `model.safetensors` or shards listed by `model.safetensors.index.json`
// ({"weight_map": {"tensor name": "model-00001-of-00002.safetensors", ...}}).
//
// WeightFiles::open() reads only the headers (the tensor bytes are paged in by whoever reads them) and
// validates everything it can without touching the data: header length sane and within the file, JSON
// parses, every dtype known, shape rank <= Shape::kMaxDims, data_offsets in bounds, contiguous and
// non-overlapping (no holes, as the format requires), each tensor aligned to its element size in the file,
// byte size == numel * dtype size, and every index entry pointing to an existing shard that contains it.
//
// Views returned by get() point into PROT_READ mappings: they are valid while the WeightFiles lives and
// must never be written through (that faults). Device is always kCpu.
//
// Slices (a tensor-parallel rank's part of a tensor) read only their own bytes: get_rows() is a view of
// rows [r0, r1) of dim 0 (no copy; only the pages of those rows are ever read from disk); read_cols()
// copies columns [c0, c1) of a 2-D tensor row by row (the bytes of the other columns are not copied, but
// rows narrower than a page are paged in whole).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "xinfer/core/status.h"
#include "xinfer/core/tensor.h"

namespace xinfer::model {

class WeightFiles {
 public:
  // NOT_FOUND "no model.safetensors or model.safetensors.index.json in DIR" when neither exists;
  // DATA_LOSS for truncated or corrupt files; INVALID_ARGUMENT for a malformed index.
  static Result<WeightFiles> open(const std::string& model_dir);

  // One safetensors file (not a model directory), validated the same way; used for golden data.
  static Result<WeightFiles> open_file(const std::string& path);
  WeightFiles(WeightFiles&&) noexcept;
  WeightFiles& operator=(WeightFiles&&) noexcept;
  ~WeightFiles();  // unmaps all files

  bool contains(const std::string& name) const;
  // NOT_FOUND "tensor 'x' not found in DIR (N tensors; did you mean 'y'?)".
  Result<TensorView> get(const std::string& name) const;
  // As get(), plus INVALID_ARGUMENT "NAME in FILE: expected shape [64, 64], found [64, 32]".
  Result<TensorView> get(const std::string& name, const Shape& expected) const;
  // Rows [r0, r1) of dim 0 of tensor `name`: shape [r1 - r0, dims 1..]. NOT_FOUND as get(); INVALID_ARGUMENT
  // "NAME in FILE: field 'rows': [r0, r1) outside [0, N)" (also for a 0-d tensor).
  Result<TensorView> get_rows(const std::string& name, int64_t r0, int64_t r1) const;
  // Columns [c0, c1) of the 2-D tensor `name` [N, K], copied: [N, c1 - c0]. INVALID_ARGUMENT for another rank
  // or a range outside [0, K) ("field 'cols'"); UNIMPLEMENTED for sub-byte dtypes (i4) unless the range is
  // byte-aligned (c0 and c1 even).
  Result<HostTensor> read_cols(const std::string& name, int64_t c0, int64_t c1) const;
  std::vector<std::string> names() const;  // sorted
  size_t num_tensors() const;
  size_t total_bytes() const;                           // sum of all tensors' data bytes
  std::string file_of(const std::string& name) const;   // file name (no directory); "" if unknown
  const std::string& dir() const;

 private:
  struct Impl;
  explicit WeightFiles(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Validates one safetensors image already in memory (what open() does per file); used by tests and tools.
// `file_name` only labels error messages. On success returns the number of tensors.
Result<size_t> validate_safetensors(const void* data, size_t size, const std::string& file_name);

// Writes a safetensors file: tensors laid out contiguously in order of decreasing element size (stable, so
// every tensor is aligned to its element size), header padded with spaces to a multiple of 8 bytes.
// `metadata` must be null or a JSON object of strings (stored as "__metadata__").
// Used by tests and tools. Views must be host memory.
Status write_safetensors(const std::string& path, const std::vector<std::pair<std::string, TensorView>>& tensors,
                         const nlohmann::json& metadata);

}  // namespace xinfer::model
