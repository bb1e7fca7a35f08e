// WeightFiles: happy paths (single file, sharded, bf16/f16/f32, a file written by the official Python
// `safetensors` package) and one test per kind of broken input, each checking the message. Broken files are
// made with write_safetensors() plus byte surgery, or from a hand-written header.
#include "xinfer/model/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "temp_dir.h"

namespace xinfer::model {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

// A safetensors image from a header and raw data, header padded with spaces to a multiple of 8.
std::string raw_safetensors(const json& header, const std::string& data) {
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
  return out + h + data;
}

json tensor_entry(const char* dtype, std::vector<int64_t> shape, uint64_t begin, uint64_t end) {
  return {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {begin, end}}};
}

HostTensor iota_f32(Shape shape, float scale = 1.0f) {
  HostTensor t(DType::kF32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i) * scale;
  return t;
}

HostTensor converted(const HostTensor& f32, DType to) {
  HostTensor t(to, f32.shape());
  convert_from_f32(to, f32.data<float>(), t.data<void>(), static_cast<size_t>(f32.numel()));
  return t;
}

std::vector<float> to_floats(const TensorView& v) {
  std::vector<float> out(static_cast<size_t>(v.numel()));
  convert_to_f32(v.dtype, v.data, out.data(), out.size());
  return out;
}

Status open_error(const std::string& dir) {
  Result<WeightFiles> r = WeightFiles::open(dir);
  EXPECT_FALSE(r.ok()) << "opened " << dir;
  return r.status();
}

// Writes `header` and data_bytes zero bytes of tensor data as dir's model.safetensors; the error opening dir.
Status open_raw_error(const TempDir& dir, const json& header, size_t data_bytes) {
  write_bytes(dir.file("model.safetensors"), raw_safetensors(header, std::string(data_bytes, '\0')));
  return open_error(dir.path());
}

// A small valid single-file model: q_proj [64, 32] f32 plus a bf16 norm.
void write_small_model(const TempDir& dir) {
  HostTensor q = iota_f32(Shape{64, 32}, 0.25f);
  HostTensor norm = converted(iota_f32(Shape{32}), DType::kBF16);
  XI_CHECK_OK(write_safetensors(dir.file("model.safetensors"),
                                {{"model.layers.0.self_attn.q_proj.weight", q.view()},
                                 {"model.norm.weight", norm.view()}},
                                json{{"format", "pt"}}));
}

TEST(WeightFiles, SingleFileRoundTripAllFloatDtypes) {
  TempDir dir;
  HostTensor f32 = iota_f32(Shape{3, 5}, 0.5f);
  HostTensor bf16 = converted(iota_f32(Shape{7}, -1.5f), DType::kBF16);
  HostTensor f16 = converted(iota_f32(Shape{2, 3, 2}, 0.125f), DType::kF16);
  HostTensor scalar = iota_f32(Shape{});
  XI_CHECK_OK(write_safetensors(dir.file("model.safetensors"),
                                {{"bf16", bf16.view()}, {"f32", f32.view()}, {"f16", f16.view()}, {"s", scalar.view()}},
                                json{{"format", "pt"}}));
  Result<WeightFiles> w = WeightFiles::open(dir.path());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->names(), (std::vector<std::string>{"bf16", "f16", "f32", "s"}));
  EXPECT_EQ(w->num_tensors(), 4u);
  EXPECT_EQ(w->total_bytes(), 15u * 4 + 7 * 2 + 12 * 2 + 4);
  EXPECT_TRUE(w->contains("f16"));
  EXPECT_FALSE(w->contains("f64"));
  EXPECT_EQ(w->file_of("f32"), "model.safetensors");
  EXPECT_EQ(w->file_of("nope"), "");

  TensorView v = *w->get("f32", Shape{3, 5});
  EXPECT_EQ(v.dtype, DType::kF32);
  EXPECT_EQ(v.device, Device::kCpu);
  EXPECT_EQ(to_floats(v)[7], 3.5f);
  TensorView b = *w->get("bf16");
  EXPECT_EQ(b.dtype, DType::kBF16);
  EXPECT_EQ(b.shape, Shape{7});
  EXPECT_EQ(to_floats(b)[6], -9.0f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data) % 2, 0u);
  TensorView h = *w->get("f16");
  EXPECT_EQ(h.shape, (Shape{2, 3, 2}));
  EXPECT_EQ(to_floats(h)[11], 1.375f);
  EXPECT_EQ(w->get("s")->shape.rank(), 0);

  // Moving keeps the mappings alive.
  WeightFiles moved = std::move(*w);
  EXPECT_EQ(to_floats(*moved.get("f32"))[14], 7.0f);
}

TEST(WeightFiles, ReadsFileWrittenByPythonSafetensors) {
  // Made by tests/unit/model/data/make_python_fixture.py with the pip `safetensors` package.
  const char* src = std::getenv("XINFER_SOURCE_DIR");
  const std::string fixture = std::string(src ? src : ".") + "/tests/unit/model/data/python_written.safetensors";
  TempDir dir;
  std::filesystem::copy_file(fixture, dir.file("model.safetensors"));
  Result<WeightFiles> w = WeightFiles::open(dir.path());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->num_tensors(), 5u);
  EXPECT_EQ(to_floats(*w->get("a.f32", Shape{2, 3})), (std::vector<float>{-1, -0.5f, 0, 0.5f, 1, 1.5f}));
  EXPECT_EQ(to_floats(*w->get("b.bf16", Shape{3})), (std::vector<float>{1, -2, 0.15625f}));
  EXPECT_EQ(to_floats(*w->get("c.f16", Shape{2, 2})), (std::vector<float>{65504, -0.25f, 6.103515625e-05f, 3}));
  TensorView d = *w->get("d.i64", Shape{2});
  EXPECT_EQ(d.as<int64_t>()[0], -7);
  EXPECT_EQ(d.as<int64_t>()[1], int64_t{1} << 40);
  TensorView e = *w->get("e.u8", Shape{5});
  EXPECT_EQ(e.as<uint8_t>()[4], 255);

  // Our writer lays out the same tensors exactly as the reference does.
  std::vector<std::pair<std::string, TensorView>> all;
  for (const std::string& n : w->names()) all.emplace_back(n, *w->get(n));
  XI_CHECK_OK(write_safetensors(dir.file("ours.safetensors"), all,
                                json{{"format", "pt"}, {"source", "make_python_fixture.py"}}));
  std::string ours = read_bytes(dir.file("ours.safetensors"));
  std::string theirs = read_bytes(fixture);
  ASSERT_EQ(ours.size(), theirs.size());
  const size_t data_start = theirs.size() - 59;  // 59 bytes of tensor data
  EXPECT_EQ(ours.substr(data_start), theirs.substr(data_start));
  EXPECT_EQ(json::parse(ours.substr(8, data_start - 8)), json::parse(theirs.substr(8, data_start - 8)));
}

TEST(WeightFiles, Sharded) {
  TempDir dir;
  HostTensor a = iota_f32(Shape{4, 4});
  HostTensor b = converted(iota_f32(Shape{8}, 2.0f), DType::kBF16);
  HostTensor c = converted(iota_f32(Shape{2, 2}), DType::kF16);
  XI_CHECK_OK(write_safetensors(dir.file("model-00001-of-00002.safetensors"), {{"a", a.view()}, {"b", b.view()}},
                                json{{"format", "pt"}}));
  XI_CHECK_OK(write_safetensors(dir.file("model-00002-of-00002.safetensors"), {{"c", c.view()}}, json()));
  json index = {{"metadata", {{"total_size", 64 + 16 + 8}}},
                {"weight_map",
                 {{"a", "model-00001-of-00002.safetensors"},
                  {"b", "model-00001-of-00002.safetensors"},
                  {"c", "model-00002-of-00002.safetensors"}}}};
  write_bytes(dir.file("model.safetensors.index.json"), index.dump(2));
  Result<WeightFiles> w = WeightFiles::open(dir.path());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(w->total_bytes(), 64u + 16 + 8);
  EXPECT_EQ(w->file_of("b"), "model-00001-of-00002.safetensors");
  EXPECT_EQ(w->file_of("c"), "model-00002-of-00002.safetensors");
  EXPECT_EQ(to_floats(*w->get("a"))[15], 15.0f);
  EXPECT_EQ(to_floats(*w->get("b"))[7], 14.0f);
  EXPECT_EQ(to_floats(*w->get("c", Shape{2, 2}))[3], 3.0f);
}

TEST(WeightFiles, OpenDoesNotReadTensorData) {
  // A 256 MiB tensor in a sparse file: open() must leave its pages alone (checked with mincore).
  TempDir dir;
  constexpr int64_t kBytes = int64_t{256} << 20;
  std::string image = raw_safetensors({{"big", tensor_entry("U8", {kBytes}, 0, kBytes)}}, "");
  write_bytes(dir.file("model.safetensors"), image);
  std::filesystem::resize_file(dir.file("model.safetensors"), image.size() + kBytes);
  Result<WeightFiles> w = WeightFiles::open(dir.path());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  TensorView v = *w->get("big");
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  auto begin = reinterpret_cast<uintptr_t>(v.data) / page * page;
  const size_t len = static_cast<size_t>(kBytes) - page;
  std::vector<unsigned char> resident((len + page - 1) / page);
  ASSERT_EQ(::mincore(reinterpret_cast<void*>(begin), len, resident.data()), 0);
  size_t n = 0;
  for (unsigned char r : resident) n += r & 1;
  EXPECT_LT(n, resident.size() / 64) << n << " of " << resident.size() << " pages were read by open()";
}

// ---- slices (tensor-parallel ranks read only their part) ----

TEST(WeightFilesSlices, RowsAndColumnsOfPythonWrittenFile) {
  const char* src = std::getenv("XINFER_SOURCE_DIR");
  const std::string fixture = std::string(src ? src : ".") + "/tests/unit/model/data/python_written.safetensors";
  TempDir dir;
  std::filesystem::copy_file(fixture, dir.file("model.safetensors"));
  Result<WeightFiles> w = WeightFiles::open(dir.path());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  // Values from make_python_fixture.py's docstring.
  Result<TensorView> r = w->get_rows("a.f32", 1, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->shape, (Shape{1, 3}));
  EXPECT_EQ(to_floats(*r), (std::vector<float>{0.5f, 1, 1.5f}));
  EXPECT_EQ(to_floats(*w->get_rows("b.bf16", 1, 3)), (std::vector<float>{-2, 0.15625f}));
  EXPECT_EQ(w->get_rows("a.f32", 2, 2)->shape, (Shape{0, 3}));
  Result<HostTensor> c = w->read_cols("a.f32", 1, 3);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->shape(), (Shape{2, 2}));
  EXPECT_EQ(to_floats(c->view()), (std::vector<float>{-0.5f, 0, 1, 1.5f}));
  EXPECT_EQ(to_floats(w->read_cols("c.f16", 0, 1)->view()), (std::vector<float>{65504, 6.103515625e-05f}));
}

TEST(WeightFilesSlices, ShardedModelSlicesEqualTheWholeTensor) {
  TempDir dir;
  HostTensor a = iota_f32(Shape{37, 29}, 0.5f), b = converted(iota_f32(Shape{12, 8}), DType::kBF16);
  XI_CHECK_OK(write_safetensors(dir.file("model-00001-of-00002.safetensors"), {{"a", a.view()}}, json()));
  XI_CHECK_OK(write_safetensors(dir.file("model-00002-of-00002.safetensors"), {{"b", b.view()}}, json()));
  write_bytes(dir.file("model.safetensors.index.json"),
              json{{"weight_map", {{"a", "model-00001-of-00002.safetensors"},
                                   {"b", "model-00002-of-00002.safetensors"}}}}.dump());
  Result<WeightFiles> w = WeightFiles::open(dir.path());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  for (auto [r0, r1] : std::vector<std::pair<int64_t, int64_t>>{{0, 37}, {0, 1}, {13, 29}, {36, 37}}) {
    TensorView v = *w->get_rows("a", r0, r1);
    ASSERT_EQ(v.shape, (Shape{r1 - r0, 29}));
    for (int64_t i = 0; i < v.numel(); ++i) ASSERT_EQ(v.as<float>()[i], 0.5f * static_cast<float>(r0 * 29 + i));
  }
  for (auto [c0, c1] : std::vector<std::pair<int64_t, int64_t>>{{0, 29}, {3, 4}, {10, 29}}) {
    Result<HostTensor> tr = w->read_cols("a", c0, c1);
    ASSERT_TRUE(tr.ok()) << tr.status().to_string();
    const HostTensor& t = *tr;
    ASSERT_EQ(t.shape(), (Shape{37, c1 - c0}));
    for (int64_t r = 0; r < 37; ++r)
      for (int64_t c = c0; c < c1; ++c)
        ASSERT_EQ(t.data<float>()[r * (c1 - c0) + c - c0], 0.5f * static_cast<float>(r * 29 + c));
  }
  EXPECT_EQ(to_floats(*w->get_rows("b", 11, 12)), (std::vector<float>{88, 89, 90, 91, 92, 93, 94, 95}));
  EXPECT_EQ(to_floats(w->read_cols("b", 6, 8)->view())[23], 95.0f);
}

TEST(WeightFilesSlices, BadRangesNameTensorFileAndField) {
  TempDir dir;
  write_small_model(dir);
  Result<WeightFiles> w = WeightFiles::open(dir.path());
  ASSERT_TRUE(w.ok());
  const std::string q = "model.layers.0.self_attn.q_proj.weight";
  Result<TensorView> r = w->get_rows(q, 3, 65);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), q + " in model.safetensors: field 'rows': [3, 65) outside [0, 64) of shape [64, 32]");
  EXPECT_THAT(w->get_rows(q, 5, 4).status().message(), HasSubstr("field 'rows': [5, 4)"));
  EXPECT_THAT(w->read_cols(q, 0, 33).status().message(), HasSubstr("field 'cols': [0, 33) outside [0, 32)"));
  EXPECT_THAT(w->read_cols("model.norm.weight", 0, 1).status().message(),
              HasSubstr("model.norm.weight in model.safetensors: field 'cols': a column slice needs a 2-D tensor"));
  EXPECT_EQ(w->get_rows("nope", 0, 1).status().code(), StatusCode::kNotFound);
}

TEST(WeightFilesSlices, RowsReadOnlyTheirPages) {
  // A 64 MiB [1024, 65536] tensor in a sparse file: reading rows [512, 528) pages in those 16 rows only.
  TempDir dir;
  constexpr int64_t kRows = 1024, kCols = 65536, kBytes = kRows * kCols;
  std::string image = raw_safetensors({{"big", tensor_entry("U8", {kRows, kCols}, 0, kBytes)}}, "");
  write_bytes(dir.file("model.safetensors"), image);
  std::filesystem::resize_file(dir.file("model.safetensors"), image.size() + kBytes);
  Result<WeightFiles> w = WeightFiles::open(dir.path());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  TensorView rows = *w->get_rows("big", 512, 528);
  ASSERT_EQ(rows.shape, (Shape{16, kCols}));
  uint64_t sum = 0;
  for (int64_t i = 0; i < rows.numel(); ++i) sum += rows.as<uint8_t>()[i];
  EXPECT_EQ(sum, 0u);
  TensorView whole = *w->get("big");
  EXPECT_EQ(static_cast<const uint8_t*>(rows.data), static_cast<const uint8_t*>(whole.data) + 512 * kCols);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  auto begin = reinterpret_cast<uintptr_t>(whole.data) / page * page;
  const size_t len = static_cast<size_t>(kBytes) - page;
  std::vector<unsigned char> resident((len + page - 1) / page);
  ASSERT_EQ(::mincore(reinterpret_cast<void*>(begin), len, resident.data()), 0);
  size_t n = 0;
  for (unsigned char r : resident) n += r & 1;
  const size_t slice_pages = static_cast<size_t>(16 * kCols) / page;
  // Read-ahead may page in a neighbourhood of the slice, never most of the tensor.
  EXPECT_LT(n, slice_pages + resident.size() / 8) << n << " of " << resident.size() << " pages resident";
  EXPECT_GE(n, slice_pages / 2);
}

// ---- bad input: one test per failure mode ----

TEST(WeightFilesErrors, MissingWeights) {
  TempDir dir;
  Status s = open_error(dir.path());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "no model.safetensors or model.safetensors.index.json in " + dir.path());
}

TEST(WeightFilesErrors, FileTooSmallForHeader) {
  TempDir dir;
  write_bytes(dir.file("model.safetensors"), "abc");
  Status s = open_error(dir.path());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), dir.file("model.safetensors") +
                             ": file is 3 bytes, too small for a safetensors header (needs at least 8)");
}

TEST(WeightFilesErrors, HeaderLengthPastEndOfFile) {
  TempDir dir;
  write_small_model(dir);
  std::string bytes = read_bytes(dir.file("model.safetensors"));
  bytes[5] = 1;  // header length += 2^40
  write_bytes(dir.file("model.safetensors"), bytes);
  Status s = open_error(dir.path());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), StartsWith(dir.file("model.safetensors") + ": corrupt header: header length 1099511"));
  EXPECT_THAT(s.message(), HasSubstr("exceeds the file size " + std::to_string(bytes.size())));
}

TEST(WeightFilesErrors, HeaderIsNotJson) {
  TempDir dir;
  write_small_model(dir);
  std::string bytes = read_bytes(dir.file("model.safetensors"));
  bytes[8] = '[';  // '{' -> '['
  write_bytes(dir.file("model.safetensors"), bytes);
  Status s = open_error(dir.path());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), StartsWith(dir.file("model.safetensors") + ": corrupt header: invalid JSON in the "));
}

TEST(WeightFilesErrors, UnknownDtype) {
  TempDir dir;
  write_small_model(dir);
  std::string bytes = read_bytes(dir.file("model.safetensors"));
  bytes.replace(bytes.find("\"BF16\""), 6, "\"QF16\"");
  write_bytes(dir.file("model.safetensors"), bytes);
  Status s = open_error(dir.path());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.message(),
            dir.file("model.safetensors") + ": corrupt header: tensor 'model.norm.weight' has unknown dtype 'QF16'");
}

TEST(WeightFilesErrors, UnsupportedDtype) {
  TempDir dir;
  Status s = open_raw_error(dir, {{"w", tensor_entry("F64", {2}, 0, 16)}}, 16);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_EQ(s.message(), dir.file("model.safetensors") +
                             ": tensor 'w' has unsupported dtype F64 (supported: F32, BF16, F16, F8_E4M3, I8, I32, "
                             "I64, U8, BOOL)");
}

TEST(WeightFilesErrors, Truncated) {
  TempDir dir;
  write_small_model(dir);
  const std::string path = dir.file("model.safetensors");
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 100);
  Status s = open_error(dir.path());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  // 64*32 f32 + 32 bf16 = 8256 bytes of data.
  EXPECT_EQ(s.message(), path + ": truncated: header says 8256 bytes of tensor data, file has 8156");
}

TEST(WeightFilesErrors, SizeDisagreesWithShape) {
  TempDir dir;
  EXPECT_EQ(open_raw_error(dir, {{"w", tensor_entry("F32", {4, 4}, 0, 60)}}, 60).message(),
            dir.file("model.safetensors") +
                ": corrupt header: tensor 'w' (F32 [4, 4]) needs 64 bytes but its data_offsets [0, 60] span 60");
}

TEST(WeightFilesErrors, OverlappingOffsets) {
  TempDir dir;
  const json header = {{"a", tensor_entry("F32", {16}, 0, 64)}, {"b", tensor_entry("F32", {16}, 32, 96)}};
  EXPECT_EQ(open_raw_error(dir, header, 96).message(),
            dir.file("model.safetensors") +
                ": corrupt header: data_offsets of 'a' and 'b' overlap ('b' starts at 32, before 'a' ends at 64)");
}

TEST(WeightFilesErrors, HoleBetweenTensors) {
  TempDir dir;
  const json header = {{"a", tensor_entry("F32", {16}, 0, 64)}, {"b", tensor_entry("F32", {16}, 128, 192)}};
  EXPECT_EQ(open_raw_error(dir, header, 192).message(),
            dir.file("model.safetensors") +
                ": corrupt header: data_offsets leave a hole: 'b' starts at 128 but 'a' ends at 64");
}

TEST(WeightFilesErrors, MisalignedTensor) {
  TempDir dir;
  json header = {{"a", tensor_entry("U8", {2}, 0, 2)}, {"b", tensor_entry("F32", {4}, 2, 18)}};
  std::string image = raw_safetensors(header, std::string(18, '\0'));
  write_bytes(dir.file("model.safetensors"), image);
  const size_t b_at = image.size() - 16;
  EXPECT_EQ(open_error(dir.path()).message(),
            dir.file("model.safetensors") + ": corrupt header: tensor 'b' (F32) starts at file byte " +
                std::to_string(b_at) + ", misaligned for its 4-byte elements");
}

TEST(WeightFilesErrors, TrailingBytes) {
  TempDir dir;
  write_small_model(dir);
  std::string bytes = read_bytes(dir.file("model.safetensors"));
  write_bytes(dir.file("model.safetensors"), bytes + "junk");
  EXPECT_EQ(open_error(dir.path()).message(),
            dir.file("model.safetensors") +
                ": corrupt header: header accounts for 8256 bytes of tensor data, file has 8260 (trailing bytes)");
}

TEST(WeightFilesErrors, IndexPointsToMissingShard) {
  TempDir dir;
  HostTensor a = iota_f32(Shape{4});
  XI_CHECK_OK(write_safetensors(dir.file("model-00001-of-00002.safetensors"), {{"a", a.view()}}, json()));
  write_bytes(dir.file("model.safetensors.index.json"),
              json{{"weight_map",
                    {{"a", "model-00001-of-00002.safetensors"},
                     {"b", "model-00002-of-00002.safetensors"},
                     {"c", "model-00002-of-00002.safetensors"}}}}
                  .dump());
  Status s = open_error(dir.path());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "model.safetensors.index.json maps 'b' (and 1 more) to model-00002-of-00002.safetensors, "
                         "which does not exist in " + dir.path());
}

TEST(WeightFilesErrors, IndexEntryMissingFromShard) {
  TempDir dir;
  HostTensor a = iota_f32(Shape{4});
  XI_CHECK_OK(write_safetensors(dir.file("model-00001-of-00001.safetensors"), {{"a", a.view()}}, json()));
  write_bytes(dir.file("model.safetensors.index.json"),
              json{{"weight_map", {{"a", "model-00001-of-00001.safetensors"},
                                   {"lm_head.weight", "model-00001-of-00001.safetensors"}}}}
                  .dump());
  Status s = open_error(dir.path());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "model.safetensors.index.json maps 'lm_head.weight' to model-00001-of-00001.safetensors, "
                         "which does not contain it (1 tensors in that file)");
}

TEST(WeightFilesErrors, MalformedIndex) {
  TempDir dir;
  write_bytes(dir.file("model.safetensors.index.json"), R"({"metadata": {}})");
  EXPECT_EQ(open_error(dir.path()).message(),
            dir.file("model.safetensors.index.json") + ": expected an object with a 'weight_map' object");
  write_bytes(dir.file("model.safetensors.index.json"), R"({"weight_map": {"a": "../evil.safetensors"}})");
  EXPECT_EQ(open_error(dir.path()).message(),
            dir.file("model.safetensors.index.json") +
                ": weight_map['a'] = '../evil.safetensors' is not a file name inside the model directory");
  write_bytes(dir.file("model.safetensors.index.json"), R"({"weight_map": )");
  EXPECT_THAT(open_error(dir.path()).message(),
              StartsWith(dir.file("model.safetensors.index.json") + ": invalid JSON: "));
}

TEST(WeightFilesErrors, MissingTensorSuggestsNearestName) {
  TempDir dir;
  write_small_model(dir);
  WeightFiles w = std::move(WeightFiles::open(dir.path())).value();
  Result<TensorView> r = w.get("model.layers.0.self_attn.q_proj.weigth");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "tensor 'model.layers.0.self_attn.q_proj.weigth' not found in " + dir.path() +
                                      " (2 tensors; did you mean 'model.layers.0.self_attn.q_proj.weight'?)");
  EXPECT_EQ(w.get("lm_head.weight").status().message(),
            "tensor 'lm_head.weight' not found in " + dir.path() + " (2 tensors)");
}

TEST(WeightFilesErrors, MisShapedTensor) {
  TempDir dir;
  write_small_model(dir);
  WeightFiles w = std::move(WeightFiles::open(dir.path())).value();
  Result<TensorView> r = w.get("model.layers.0.self_attn.q_proj.weight", Shape{64, 64});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "model.layers.0.self_attn.q_proj.weight in model.safetensors: expected shape [64, 64], found [64, 32]");
}

TEST(WeightFilesErrors, ValidateInMemoryImage) {
  std::string image = raw_safetensors({{"w", tensor_entry("BF16", {3}, 0, 6)}}, std::string(6, '\0'));
  EXPECT_EQ(*validate_safetensors(image.data(), image.size(), "mem"), 1u);
  image.resize(image.size() - 1);
  EXPECT_EQ(validate_safetensors(image.data(), image.size(), "mem").status().message(),
            "mem: truncated: header says 6 bytes of tensor data, file has 5");
}

}  // namespace
}  // namespace xinfer::model
