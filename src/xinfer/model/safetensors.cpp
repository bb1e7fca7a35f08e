#include "xinfer/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

namespace xinfer::model {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the limit the reference implementation enforces

// Dtypes the format defines but xinfer does not load: UNIMPLEMENTED rather than "corrupt".
bool is_known_unsupported_dtype(const std::string& s) {
  static const char* const kOthers[] = {"F64", "I16", "U16", "U32", "U64", "F8_E5M2", "F8_E8M0", "F6_E2M3",
                                        "F6_E3M2", "F4", "C64"};
  return std::any_of(std::begin(kOthers), std::end(kOthers), [&](const char* o) { return s == o; });
}

// Where one tensor lives inside one file.
struct Entry {
  int file = 0;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t offset = 0;  // from the start of the file
  uint64_t bytes = 0;
};

std::string describe(const std::string& name, const std::string& dtype, const std::vector<int64_t>& dims) {
  std::ostringstream os;
  os << "'" << name << "' (" << dtype << " [";
  for (size_t i = 0; i < dims.size(); ++i) os << (i ? ", " : "") << dims[i];
  os << "])";
  return os.str();
}

// Parses and validates one safetensors image (see the header comment for what is checked). Fills `out`
// with name -> Entry (file index `file`).
Status parse_safetensors(const uint8_t* data, uint64_t size, const std::string& file, int file_index,
                         std::map<std::string, Entry>* out) {
  if (size < 8)
    return data_loss(file + ": file is " + std::to_string(size) +
                     " bytes, too small for a safetensors header (needs at least 8)");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];  // little-endian u64
  if (header_len > size - 8)
    return data_loss(file + ": corrupt header: header length " + std::to_string(header_len) +
                     " exceeds the file size " + std::to_string(size) + " (corrupt or truncated file)");
  if (header_len > kMaxHeaderBytes)
    return data_loss(file + ": corrupt header: header length " + std::to_string(header_len) +
                     " is larger than the 100 MiB limit");
  const char* hbegin = reinterpret_cast<const char*>(data + 8);
  json header;
  try {
    header = json::parse(hbegin, hbegin + header_len);
  } catch (const json::parse_error& e) {
    return data_loss(file + ": corrupt header: invalid JSON in the " + std::to_string(header_len) +
                     "-byte header: " + e.what());
  }
  if (!header.is_object())
    return data_loss(file + ": corrupt header: expected a JSON object, found " + std::string(header.type_name()));

  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = size - data_start;
  struct Span {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Span> spans;
  std::map<std::string, Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object() && !info.is_null())
        return data_loss(file + ": corrupt header: __metadata__ must be an object, found " +
                         std::string(info.type_name()));
      continue;
    }
    const std::string where = file + ": corrupt header: tensor '" + name + "'";
    if (!info.is_object()) return data_loss(where + " is a " + info.type_name() + ", expected an object");
    if (!info.contains("dtype") || !info["dtype"].is_string())
      return data_loss(where + " has no string 'dtype'");
    const std::string dtype_str = info["dtype"].get<std::string>();
    std::optional<DType> dtype = dtype_from_safetensors(dtype_str);
    if (!dtype) {
      if (is_known_unsupported_dtype(dtype_str))
        return unimplemented(file + ": tensor '" + name + "' has unsupported dtype " + dtype_str +
                             " (supported: F32, BF16, F16, F8_E4M3, I8, I32, I64, U8, BOOL)");
      return data_loss(where + " has unknown dtype '" + dtype_str + "'");
    }
    if (!info.contains("shape") || !info["shape"].is_array()) return data_loss(where + " has no 'shape' list");
    std::vector<int64_t> dims;
    uint64_t numel = 1;
    for (const json& d : info["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 40))
        return data_loss(where + " has an invalid dimension " + d.dump() + " in its shape " + info["shape"].dump());
      dims.push_back(d.get<int64_t>());
      numel *= d.get<uint64_t>();
      if (numel > (uint64_t{1} << 40)) return data_loss(where + " has an absurd shape " + info["shape"].dump());
    }
    if (static_cast<int>(dims.size()) > Shape::kMaxDims)
      return unimplemented(file + ": tensor '" + name + "' has rank " + std::to_string(dims.size()) +
                           " (at most " + std::to_string(Shape::kMaxDims) + " supported)");
    const json& offs = info.contains("data_offsets") ? info["data_offsets"] : json();
    if (!offs.is_array() || offs.size() != 2 || !offs[0].is_number_unsigned() || !offs[1].is_number_unsigned())
      return data_loss(where + " has invalid data_offsets " + offs.dump() + " (expected [begin, end])");
    const uint64_t begin = offs[0].get<uint64_t>(), end = offs[1].get<uint64_t>();
    if (end < begin)
      return data_loss(where + " has data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                       "] that end before they begin");
    const uint64_t expected_bytes = dtype_bytes(*dtype, numel);
    if (end - begin != expected_bytes)
      return data_loss(file + ": corrupt header: tensor " + describe(name, dtype_str, dims) + " needs " +
                       std::to_string(expected_bytes) + " bytes but its data_offsets [" + std::to_string(begin) +
                       ", " + std::to_string(end) + "] span " + std::to_string(end - begin));
    Entry e;
    e.file = file_index;
    e.dtype = *dtype;
    Shape s;
    switch (dims.size()) {
      case 0: s = Shape{}; break;
      case 1: s = Shape{dims[0]}; break;
      case 2: s = Shape{dims[0], dims[1]}; break;
      case 3: s = Shape{dims[0], dims[1], dims[2]}; break;
      case 4: s = Shape{dims[0], dims[1], dims[2], dims[3]}; break;
      default: s = Shape{dims[0], dims[1], dims[2], dims[3], dims[4]}; break;
    }
    e.shape = s;
    e.offset = data_start + begin;
    e.bytes = expected_bytes;
    auto [it, inserted] = entries.emplace(name, e);
    spans.push_back({begin, end, &it->first});
  }

  // The tensors must tile the data section exactly: no holes, no overlap, nothing after the last one.
  uint64_t max_end = 0;
  for (const Span& sp : spans) max_end = std::max(max_end, sp.end);
  if (max_end > data_size)
    return data_loss(file + ": truncated: header says " + std::to_string(max_end) + " bytes of tensor data, file has " +
                     std::to_string(data_size));
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t prev_end = 0;
  const std::string* prev_name = nullptr;
  for (const Span& sp : spans) {
    if (sp.begin < prev_end)
      return data_loss(file + ": corrupt header: data_offsets of '" + *prev_name + "' and '" + *sp.name +
                       "' overlap ('" + *sp.name + "' starts at " + std::to_string(sp.begin) + ", before '" +
                       *prev_name + "' ends at " + std::to_string(prev_end) + ")");
    if (sp.begin > prev_end)
      return data_loss(file + ": corrupt header: data_offsets leave a hole: '" + *sp.name + "' starts at " +
                       std::to_string(sp.begin) + " but " +
                       (prev_name ? "'" + *prev_name + "' ends at " + std::to_string(prev_end)
                                  : std::string("the data section starts at 0")));
    prev_end = sp.end;
    prev_name = sp.name;
  }
  if (max_end < data_size)
    return data_loss(file + ": corrupt header: header accounts for " + std::to_string(max_end) +
                     " bytes of tensor data, file has " + std::to_string(data_size) + " (trailing bytes)");
  for (const auto& [name, e] : entries) {
    const uint64_t elem_bytes = std::max(1, dtype_bits(e.dtype) / 8);
    if (e.offset % elem_bytes != 0)
      return data_loss(file + ": corrupt header: tensor '" + name + "' (" + dtype_to_safetensors(e.dtype) +
                       ") starts at file byte " + std::to_string(e.offset) + ", misaligned for its " +
                       std::to_string(elem_bytes) + "-byte elements");
  }
  out->merge(entries);
  return Status::ok_status();
}

// A read-only mapping of one whole file.
struct MappedFile {
  std::string name;  // file name inside the model directory
  const uint8_t* data = nullptr;
  size_t size = 0;
};

Result<MappedFile> map_file(const fs::path& path) {
  MappedFile m;
  m.name = path.filename().string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return Status(err == ENOENT ? StatusCode::kNotFound : StatusCode::kInvalidArgument,
                  path.string() + ": cannot open: " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return invalid_argument(path.string() + ": cannot stat: " + std::strerror(err));
  }
  m.size = static_cast<size_t>(st.st_size);
  if (m.size > 0) {
    void* p = ::mmap(nullptr, m.size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return invalid_argument(path.string() + ": cannot mmap " + std::to_string(m.size) + " bytes: " + std::strerror(err));
    }
    m.data = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file alive
  return m;
}

void unmap(MappedFile& m) {
  if (m.data) ::munmap(const_cast<uint8_t*>(m.data), m.size);
  m.data = nullptr;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

struct WeightFiles::Impl {
  std::string dir;
  std::vector<MappedFile> files;
  std::map<std::string, Entry> entries;
  size_t total_bytes = 0;

  ~Impl() {
    for (MappedFile& f : files) unmap(f);
  }

  // Maps `path` and parses its header into `parsed`; errors name the full path.
  Status add_file(const fs::path& path, std::map<std::string, Entry>* parsed) {
    XI_ASSIGN_OR_RETURN(MappedFile m, map_file(path));
    files.push_back(m);  // owned from here on, so the destructor unmaps it on error too
    return parse_safetensors(m.data, m.size, path.string(), static_cast<int>(files.size()) - 1, parsed);
  }
};

WeightFiles::WeightFiles(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
WeightFiles::WeightFiles(WeightFiles&&) noexcept = default;
WeightFiles& WeightFiles::operator=(WeightFiles&&) noexcept = default;
WeightFiles::~WeightFiles() = default;

Result<WeightFiles> WeightFiles::open(const std::string& model_dir) {
  auto impl = std::make_unique<Impl>();
  impl->dir = model_dir;
  const fs::path dir(model_dir);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return not_found("model directory " + model_dir + " does not exist");

  if (fs::exists(dir / kSingleFile, ec)) {
    XI_RETURN_IF_ERROR(impl->add_file(dir / kSingleFile, &impl->entries));
  } else if (fs::exists(dir / kIndexFile, ec)) {
    const std::string index_name = (dir / kIndexFile).string();
    std::ifstream in(dir / kIndexFile, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    json index;
    try {
      index = json::parse(ss.str());
    } catch (const json::parse_error& e) {
      return invalid_argument(index_name + ": invalid JSON: " + e.what());
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      return invalid_argument(index_name + ": expected an object with a 'weight_map' object");
    // shard file name -> tensor names the index puts there
    std::map<std::string, std::vector<std::string>> shards;
    for (const auto& [name, file] : index["weight_map"].items()) {
      if (!file.is_string())
        return invalid_argument(index_name + ": weight_map['" + name + "'] must be a file name, found " + file.dump());
      const std::string f = file.get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
        return invalid_argument(index_name + ": weight_map['" + name + "'] = '" + f +
                                "' is not a file name inside the model directory");
      shards[f].push_back(name);
    }
    if (shards.empty()) return invalid_argument(index_name + ": weight_map is empty");
    for (const auto& [file, names] : shards) {
      if (!fs::exists(dir / file, ec))
        return not_found(std::string(kIndexFile) + " maps '" + names.front() + "'" +
                         (names.size() > 1 ? " (and " + std::to_string(names.size() - 1) + " more)" : "") + " to " +
                         file + ", which does not exist in " + model_dir);
      std::map<std::string, Entry> parsed;
      XI_RETURN_IF_ERROR(impl->add_file(dir / file, &parsed));
      for (const std::string& name : names) {
        auto it = parsed.find(name);
        if (it == parsed.end())
          return not_found(std::string(kIndexFile) + " maps '" + name + "' to " + file + ", which does not contain it (" +
                           std::to_string(parsed.size()) + " tensors in that file)");
        impl->entries.emplace(name, it->second);
      }
    }
  } else {
    return not_found(std::string("no ") + kSingleFile + " or " + kIndexFile + " in " + model_dir);
  }
  for (const auto& [name, e] : impl->entries) impl->total_bytes += e.bytes;
  return WeightFiles(std::move(impl));
}

Result<WeightFiles> WeightFiles::open_file(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->dir = fs::path(path).parent_path().string();
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return not_found(path + ": no such file");
  XI_RETURN_IF_ERROR(impl->add_file(path, &impl->entries));
  for (const auto& [name, e] : impl->entries) impl->total_bytes += e.bytes;
  return WeightFiles(std::move(impl));
}

bool WeightFiles::contains(const std::string& name) const { return impl_->entries.count(name) != 0; }

Result<TensorView> WeightFiles::get(const std::string& name) const {
  auto it = impl_->entries.find(name);
  if (it == impl_->entries.end()) {
    std::ostringstream os;
    os << "tensor '" << name << "' not found in " << impl_->dir << " (" << impl_->entries.size() << " tensors";
    std::vector<std::pair<size_t, const std::string*>> near;
    const size_t limit = std::max<size_t>(2, name.size() / 4);
    for (const auto& [candidate, e] : impl_->entries) {
      const size_t d = edit_distance(name, candidate);
      if (d <= limit) near.emplace_back(d, &candidate);
    }
    std::sort(near.begin(), near.end());
    for (size_t i = 0; i < near.size() && i < 3; ++i) os << (i ? ", '" : "; did you mean '") << *near[i].second << "'";
    if (!near.empty()) os << "?";
    os << ")";
    return not_found(os.str());
  }
  const Entry& e = it->second;
  const MappedFile& f = impl_->files[static_cast<size_t>(e.file)];
  TensorView v;
  v.data = const_cast<uint8_t*>(f.data) + e.offset;  // read-only mapping: never write through it
  v.dtype = e.dtype;
  v.shape = e.shape;
  v.device = Device::kCpu;
  return v;
}

Result<TensorView> WeightFiles::get(const std::string& name, const Shape& expected) const {
  XI_ASSIGN_OR_RETURN(TensorView v, get(name));
  if (v.shape != expected)
    return invalid_argument(name + " in " + file_of(name) + ": expected shape " + expected.to_string() + ", found " +
                            v.shape.to_string());
  return v;
}

Result<TensorView> WeightFiles::get_rows(const std::string& name, int64_t r0, int64_t r1) const {
  XI_ASSIGN_OR_RETURN(TensorView v, get(name));
  const int64_t n = v.shape.rank() > 0 ? v.shape[0] : 0;
  if (v.shape.rank() == 0 || r0 < 0 || r1 < r0 || r1 > n)
    return invalid_argument(name + " in " + file_of(name) + ": field 'rows': [" + std::to_string(r0) + ", " +
                            std::to_string(r1) + ") outside [0, " + std::to_string(n) + ") of shape " +
                            v.shape.to_string());
  const size_t row_bytes = n == 0 ? 0 : v.bytes() / static_cast<size_t>(n);
  if (row_bytes * static_cast<size_t>(n) != v.bytes())  // i4 rows of an odd width
    return unimplemented(name + " in " + file_of(name) + ": field 'rows': rows of " + dtype_name(v.dtype) +
                         " shape " + v.shape.to_string() + " are not whole bytes");
  v.data = static_cast<uint8_t*>(v.data) + static_cast<size_t>(r0) * row_bytes;
  const Shape& s = v.shape;
  const int64_t m = r1 - r0;
  switch (s.rank()) {
    case 1: v.shape = Shape{m}; break;
    case 2: v.shape = Shape{m, s[1]}; break;
    case 3: v.shape = Shape{m, s[1], s[2]}; break;
    case 4: v.shape = Shape{m, s[1], s[2], s[3]}; break;
    default: v.shape = Shape{m, s[1], s[2], s[3], s[4]}; break;
  }
  return v;
}

Result<HostTensor> WeightFiles::read_cols(const std::string& name, int64_t c0, int64_t c1) const {
  XI_ASSIGN_OR_RETURN(TensorView v, get(name));
  if (v.shape.rank() != 2)
    return invalid_argument(name + " in " + file_of(name) + ": field 'cols': a column slice needs a 2-D tensor, found " +
                            v.shape.to_string());
  const int64_t n = v.shape[0], k = v.shape[1];
  if (c0 < 0 || c1 < c0 || c1 > k)
    return invalid_argument(name + " in " + file_of(name) + ": field 'cols': [" + std::to_string(c0) + ", " +
                            std::to_string(c1) + ") outside [0, " + std::to_string(k) + ")");
  const int bits = dtype_bits(v.dtype);
  if ((c0 * bits) % 8 != 0 || (c1 * bits) % 8 != 0 || (k * bits) % 8 != 0)
    return unimplemented(name + " in " + file_of(name) + ": field 'cols': [" + std::to_string(c0) + ", " +
                         std::to_string(c1) + ") of " + dtype_name(v.dtype) + " is not byte-aligned");
  HostTensor out(v.dtype, Shape{n, c1 - c0});
  const size_t row_bytes = static_cast<size_t>(k * bits / 8), b0 = static_cast<size_t>(c0 * bits / 8),
               len = static_cast<size_t>((c1 - c0) * bits / 8);
  const auto* src = static_cast<const uint8_t*>(v.data);
  auto* dst = out.data<uint8_t>();
  for (int64_t r = 0; r < n; ++r) std::memcpy(dst + static_cast<size_t>(r) * len, src + r * row_bytes + b0, len);
  return out;
}

std::vector<std::string> WeightFiles::names() const {
  std::vector<std::string> out;
  out.reserve(impl_->entries.size());
  for (const auto& [name, e] : impl_->entries) out.push_back(name);
  return out;
}

size_t WeightFiles::num_tensors() const { return impl_->entries.size(); }
size_t WeightFiles::total_bytes() const { return impl_->total_bytes; }
const std::string& WeightFiles::dir() const { return impl_->dir; }

std::string WeightFiles::file_of(const std::string& name) const {
  auto it = impl_->entries.find(name);
  return it == impl_->entries.end() ? std::string() : impl_->files[static_cast<size_t>(it->second.file)].name;
}

Result<size_t> validate_safetensors(const void* data, size_t size, const std::string& file_name) {
  std::map<std::string, Entry> entries;
  XI_RETURN_IF_ERROR(parse_safetensors(static_cast<const uint8_t*>(data), size, file_name, 0, &entries));
  return entries.size();
}

Status write_safetensors(const std::string& path, const std::vector<std::pair<std::string, TensorView>>& tensors,
                         const json& metadata) {
  // Larger elements first keeps every tensor aligned to its element size (the header is padded to 8).
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return dtype_bits(tensors[a].second.dtype) > dtype_bits(tensors[b].second.dtype);
  });
  json header = json::object();
  if (!metadata.is_null()) {
    if (!metadata.is_object()) return invalid_argument("write_safetensors: metadata must be a JSON object");
    for (const auto& [k, v] : metadata.items())
      if (!v.is_string()) return invalid_argument("write_safetensors: metadata['" + k + "'] must be a string");
    header["__metadata__"] = metadata;
  }
  uint64_t offset = 0;
  for (size_t i : order) {
    const auto& [name, t] = tensors[i];
    if (t.dtype == DType::kI4) return invalid_argument("write_safetensors: '" + name + "': i4 has no safetensors dtype");
    if (t.device != Device::kCpu) return invalid_argument("write_safetensors: '" + name + "' is not in host memory");
    if (header.contains(name) || name == "__metadata__")
      return invalid_argument("write_safetensors: duplicate tensor name '" + name + "'");
    json dims = json::array();
    for (int d = 0; d < t.shape.rank(); ++d) dims.push_back(t.shape[d]);
    header[name] = {{"dtype", dtype_to_safetensors(t.dtype)}, {"shape", dims}, {"data_offsets", {offset, offset + t.bytes()}}};
    offset += t.bytes();
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return invalid_argument("cannot write " + path + ": " + std::strerror(errno));
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(h.size()) >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (size_t i : order) {
    const TensorView& t = tensors[i].second;
    if (t.bytes() > 0) out.write(static_cast<const char*>(t.data), static_cast<std::streamsize>(t.bytes()));
  }
  out.close();
  if (!out) return internal_error("error writing " + path);
  return Status::ok_status();
}

}  // namespace xinfer::model
