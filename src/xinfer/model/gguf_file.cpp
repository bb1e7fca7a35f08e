#include "xinfer/model/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <unordered_map>

namespace xinfer::model {
namespace {

constexpr uint64_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS

// Minimal bytes a value of each type occupies in the file (arrays: type + count; strings: the length).
uint64_t min_value_bytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kU16:
    case GgufValueType::kI16:
      return 2;
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kF32:
      return 4;
    case GgufValueType::kU64:
    case GgufValueType::kI64:
    case GgufValueType::kF64:
      return 8;
    case GgufValueType::kString:
      return 8;
    case GgufValueType::kArray:
      return 12;
  }
  return 1;
}

bool known_value_type(uint32_t t) {
  return t <= 12;
}

// A bounds-checked little-endian cursor over the file image. Every read names what it reads, so that a
// truncated file says where it ended.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, std::string file)
      : p_(data), begin_(data), end_(data + size), file_(std::move(file)) {}
  size_t offset() const { return static_cast<size_t>(p_ - begin_); }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }

  template <typename T>
  Result<T> read(const std::string& what) {
    if (remaining() < sizeof(T)) return truncated(what, sizeof(T));
    T v;
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  Result<std::string> string(const std::string& what) {
    XI_ASSIGN_OR_RETURN(uint64_t n, read<uint64_t>(what + " (string length)"));
    if (n > remaining()) return truncated(what + " (string of " + std::to_string(n) + " bytes)", n);
    std::string s(reinterpret_cast<const char*>(p_), static_cast<size_t>(n));
    p_ += n;
    return s;
  }
  Status truncated(const std::string& what, uint64_t need) const {
    return data_loss(file_ + ": truncated file: " + what + " needs " + std::to_string(need) +
                     " bytes at offset " + std::to_string(offset()) + ", " + std::to_string(remaining()) +
                     " left");
  }

 private:
  const uint8_t* p_;
  const uint8_t* begin_;
  const uint8_t* end_;
  std::string file_;
};

Result<GgufValue> read_value(Cursor& c, GgufValueType type, const std::string& what, const std::string& file,
                             int depth);

Result<GgufValue> read_scalar(Cursor& c, GgufValueType type, const std::string& what) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufValueType::kU8: {
      XI_ASSIGN_OR_RETURN(uint8_t x, c.read<uint8_t>(what));
      v.i = x;
      break;
    }
    case GgufValueType::kI8: {
      XI_ASSIGN_OR_RETURN(int8_t x, c.read<int8_t>(what));
      v.i = x;
      break;
    }
    case GgufValueType::kU16: {
      XI_ASSIGN_OR_RETURN(uint16_t x, c.read<uint16_t>(what));
      v.i = x;
      break;
    }
    case GgufValueType::kI16: {
      XI_ASSIGN_OR_RETURN(int16_t x, c.read<int16_t>(what));
      v.i = x;
      break;
    }
    case GgufValueType::kU32: {
      XI_ASSIGN_OR_RETURN(uint32_t x, c.read<uint32_t>(what));
      v.i = x;
      break;
    }
    case GgufValueType::kI32: {
      XI_ASSIGN_OR_RETURN(int32_t x, c.read<int32_t>(what));
      v.i = x;
      break;
    }
    case GgufValueType::kU64: {
      XI_ASSIGN_OR_RETURN(uint64_t x, c.read<uint64_t>(what));
      v.u = x;
      v.i = static_cast<int64_t>(x);
      break;
    }
    case GgufValueType::kI64: {
      XI_ASSIGN_OR_RETURN(int64_t x, c.read<int64_t>(what));
      v.i = x;
      break;
    }
    case GgufValueType::kF32: {
      XI_ASSIGN_OR_RETURN(float x, c.read<float>(what));
      v.f = x;
      break;
    }
    case GgufValueType::kF64: {
      XI_ASSIGN_OR_RETURN(double x, c.read<double>(what));
      v.f = x;
      break;
    }
    case GgufValueType::kBool: {
      XI_ASSIGN_OR_RETURN(uint8_t x, c.read<uint8_t>(what));
      v.i = x != 0;
      break;
    }
    case GgufValueType::kString: {
      XI_ASSIGN_OR_RETURN(v.s, c.string(what));
      break;
    }
    case GgufValueType::kArray:
      break;  // handled by read_value
  }
  if (type != GgufValueType::kU64) v.u = static_cast<uint64_t>(v.i);
  return v;
}

Result<GgufValue> read_value(Cursor& c, GgufValueType type, const std::string& what, const std::string& file,
                             int depth) {
  if (type != GgufValueType::kArray) return read_scalar(c, type, what);
  if (depth > 8) return data_loss(file + ": " + what + ": arrays nested deeper than 8");
  GgufValue v;
  v.type = GgufValueType::kArray;
  XI_ASSIGN_OR_RETURN(uint32_t et, c.read<uint32_t>(what + " (array element type)"));
  if (!known_value_type(et))
    return data_loss(file + ": " + what + ": field 'array element type': unknown GGUF value type " +
                     std::to_string(et));
  v.elem_type = static_cast<GgufValueType>(et);
  XI_ASSIGN_OR_RETURN(uint64_t n, c.read<uint64_t>(what + " (array count)"));
  // An absurd count fails here, before any allocation: every element takes at least min_value_bytes.
  if (n > c.remaining() / min_value_bytes(v.elem_type))
    return data_loss(file + ": " + what + ": field 'array count': " + std::to_string(n) + " elements of " +
                     gguf_value_type_name(v.elem_type) + " cannot fit in the " +
                     std::to_string(c.remaining()) + " bytes left");
  const auto count = static_cast<size_t>(n);
  for (size_t k = 0; k < count; ++k) {
    const std::string elem = what + "[" + std::to_string(k) + "]";
    if (v.elem_type == GgufValueType::kArray) {
      XI_ASSIGN_OR_RETURN(GgufValue item, read_value(c, v.elem_type, elem, file, depth + 1));
      v.items.push_back(std::move(item));
      continue;
    }
    XI_ASSIGN_OR_RETURN(GgufValue e, read_scalar(c, v.elem_type, elem));
    if (v.elem_type == GgufValueType::kString) {
      if (v.strings.empty()) v.strings.reserve(count);
      v.strings.push_back(std::move(e.s));
    } else if (e.is_float()) {
      if (v.floats.empty()) v.floats.reserve(count);
      v.floats.push_back(e.f);
    } else {
      if (v.ints.empty()) v.ints.reserve(count);
      v.ints.push_back(e.i);
    }
  }
  return v;
}

std::string shape_string(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[ne.size() - 1 - i]);
  return s + "]";
}

}  // namespace

const char* gguf_value_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8:
      return "u8";
    case GgufValueType::kI8:
      return "i8";
    case GgufValueType::kU16:
      return "u16";
    case GgufValueType::kI16:
      return "i16";
    case GgufValueType::kU32:
      return "u32";
    case GgufValueType::kI32:
      return "i32";
    case GgufValueType::kF32:
      return "f32";
    case GgufValueType::kBool:
      return "bool";
    case GgufValueType::kString:
      return "string";
    case GgufValueType::kArray:
      return "array";
    case GgufValueType::kU64:
      return "u64";
    case GgufValueType::kI64:
      return "i64";
    case GgufValueType::kF64:
      return "f64";
  }
  return "?";
}

bool GgufValue::is_integer() const {
  return type != GgufValueType::kF32 && type != GgufValueType::kF64 && type != GgufValueType::kString &&
         type != GgufValueType::kArray;
}

size_t GgufValue::array_size() const {
  return ints.size() + floats.size() + strings.size() + items.size();
}

Shape GgufTensorInfo::shape() const {
  switch (ne.size()) {
    case 1:
      return Shape{ne[0]};
    case 2:
      return Shape{ne[1], ne[0]};
    case 3:
      return Shape{ne[2], ne[1], ne[0]};
    default:
      return Shape{ne[3], ne[2], ne[1], ne[0]};
  }
}

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

struct GgufFile::Impl {
  std::string path;
  void* map = nullptr;
  size_t map_size = 0;
  uint32_t version = 0;
  uint64_t alignment = kDefaultAlignment;
  std::map<std::string, GgufValue> metadata;
  std::vector<GgufTensorInfo> tensors;
  std::unordered_map<std::string, size_t> by_name;
  ~Impl() {
    if (map != nullptr) munmap(map, map_size);
  }
};

GgufFile::GgufFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

Result<GgufFile> parse_gguf(const void* data, size_t size, const std::string& file) {
  auto impl = std::make_unique<GgufFile::Impl>();
  impl->path = file;
  const auto* bytes = static_cast<const uint8_t*>(data);
  Cursor c(bytes, size, file);
  if (size < 4 || std::memcmp(bytes, "GGUF", 4) != 0)
    return data_loss(file + ": not a GGUF file (magic is not 'GGUF')");
  XI_ASSIGN_OR_RETURN(uint32_t magic, c.read<uint32_t>("magic"));
  (void)magic;
  XI_ASSIGN_OR_RETURN(impl->version, c.read<uint32_t>("header field 'version'"));
  if (impl->version == 1)
    return unimplemented(file + ": field 'version': GGUF v1 is not supported (only 2 and 3)");
  if (impl->version != 2 && impl->version != 3) {
    if ((impl->version & 0xFFFF) == 0)
      return unimplemented(file + ": field 'version': " + std::to_string(impl->version) +
                           " looks like a big-endian GGUF, which is not supported");
    return unimplemented(file + ": field 'version': unsupported GGUF version " +
                         std::to_string(impl->version) + " (supported: 2, 3)");
  }
  XI_ASSIGN_OR_RETURN(uint64_t n_tensors, c.read<uint64_t>("header field 'tensor_count'"));
  XI_ASSIGN_OR_RETURN(uint64_t n_kv, c.read<uint64_t>("header field 'kv_count'"));
  // Each tensor info is at least 8 (name) + 4 + 8 + 4 + 8 bytes, each metadata entry 8 + 4 + 1.
  if (n_tensors > c.remaining() / 32)
    return data_loss(file + ": header field 'tensor_count': " + std::to_string(n_tensors) +
                     " tensors cannot fit in a file of " + std::to_string(size) + " bytes");
  if (n_kv > c.remaining() / 13)
    return data_loss(file + ": header field 'kv_count': " + std::to_string(n_kv) +
                     " metadata entries cannot fit in a file of " + std::to_string(size) + " bytes");

  for (uint64_t k = 0; k < n_kv; ++k) {
    const std::string entry = "metadata entry " + std::to_string(k);
    XI_ASSIGN_OR_RETURN(std::string key, c.string(entry + " key"));
    const std::string what = "metadata key '" + key + "'";
    XI_ASSIGN_OR_RETURN(uint32_t type, c.read<uint32_t>(what + " (value type)"));
    if (!known_value_type(type))
      return data_loss(file + ": " + what + ": field 'value type': unknown GGUF value type " +
                       std::to_string(type));
    XI_ASSIGN_OR_RETURN(GgufValue v, read_value(c, static_cast<GgufValueType>(type), what, file, 0));
    if (impl->metadata.count(key)) return data_loss(file + ": " + what + " appears twice");
    impl->metadata.emplace(std::move(key), std::move(v));
  }
  if (auto it = impl->metadata.find("general.alignment"); it != impl->metadata.end()) {
    const GgufValue& a = it->second;
    if (!a.is_integer() || a.type == GgufValueType::kBool || a.i <= 0 || (a.i & (a.i - 1)) != 0)
      return data_loss(file + ": metadata key 'general.alignment': expected a power of two, found " +
                       (a.is_integer() ? std::to_string(a.i) : std::string(gguf_value_type_name(a.type))));
    impl->alignment = static_cast<uint64_t>(a.i);
  }

  for (uint64_t t = 0; t < n_tensors; ++t) {
    GgufTensorInfo info;
    XI_ASSIGN_OR_RETURN(info.name, c.string("tensor info " + std::to_string(t) + " name"));
    const std::string what = "tensor '" + info.name + "'";
    XI_ASSIGN_OR_RETURN(uint32_t n_dims, c.read<uint32_t>(what + " field 'n_dims'"));
    if (n_dims == 0 || n_dims > kMaxDims)
      return data_loss(file + ": " + what + ": field 'n_dims': " + std::to_string(n_dims) +
                       " (expected 1 to 4)");
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      XI_ASSIGN_OR_RETURN(uint64_t ne, c.read<uint64_t>(what + " field 'ne[" + std::to_string(d) + "]'"));
      if (ne == 0 || ne > (uint64_t{1} << 40) || static_cast<uint64_t>(numel) > (uint64_t{1} << 50) / ne)
        return data_loss(file + ": " + what + ": field 'ne[" + std::to_string(d) + "]': dimension " +
                         std::to_string(ne) + " is zero or too large");
      info.ne.push_back(static_cast<int64_t>(ne));
      numel *= static_cast<int64_t>(ne);
    }
    XI_ASSIGN_OR_RETURN(uint32_t type_id, c.read<uint32_t>(what + " field 'type'"));
    const std::optional<quant::GgufType> type = quant::gguf_type_from_id(type_id);
    if (!type)
      return unimplemented(file + ": " + what + ": field 'type': unknown GGUF tensor type " +
                           std::to_string(type_id));
    info.type = *type;
    Result<size_t> row = quant::gguf_row_bytes(info.type, info.ne[0]);
    if (!row.ok())
      return data_loss(file + ": " + what + ": field 'ne[0]': " + std::to_string(info.ne[0]) +
                       " is not a multiple of " + gguf_type_name(info.type) + "'s block of " +
                       std::to_string(quant::gguf_block_elems(info.type)));
    info.bytes = *row * static_cast<size_t>(numel / info.ne[0]);
    XI_ASSIGN_OR_RETURN(info.offset, c.read<uint64_t>(what + " field 'offset'"));
    if (info.offset % impl->alignment != 0)
      return data_loss(file + ": " + what + ": field 'offset': " + std::to_string(info.offset) +
                       " is not a multiple of the alignment " + std::to_string(impl->alignment));
    if (impl->by_name.count(info.name)) return data_loss(file + ": " + what + " appears twice");
    impl->by_name.emplace(info.name, impl->tensors.size());
    impl->tensors.push_back(std::move(info));
  }

  const uint64_t data_start = (c.offset() + impl->alignment - 1) / impl->alignment * impl->alignment;
  for (GgufTensorInfo& info : impl->tensors) {
    const uint64_t avail = size > data_start ? size - data_start : 0;
    if (info.offset > avail || info.bytes > avail - info.offset)
      return data_loss(file + ": tensor '" + info.name + "': field 'offset': data [" +
                       std::to_string(info.offset) + ", " + std::to_string(info.offset + info.bytes) +
                       ") of " + shape_string(info.ne) + " " + gguf_type_name(info.type) +
                       " runs past the end of the data section (" + std::to_string(avail) +
                       " bytes; truncated file?)");
    info.data = bytes + data_start + info.offset;
  }
  return GgufFile(std::move(impl));
}

Result<GgufFile> GgufFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return not_found(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return not_found(path + ": cannot stat");
  }
  const auto size = static_cast<size_t>(st.st_size);
  void* map = nullptr;
  if (size > 0) {
    map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      ::close(fd);
      return data_loss(path + ": mmap failed: " + std::strerror(errno));
    }
  }
  ::close(fd);
  static const uint8_t kEmpty = 0;
  Result<GgufFile> parsed = parse_gguf(map ? map : &kEmpty, size, path);
  if (!parsed.ok()) {
    if (map) munmap(map, size);
    return parsed.status();
  }
  GgufFile f = std::move(parsed).value();
  f.impl_->map = map;
  f.impl_->map_size = size;
  return f;
}

const std::string& GgufFile::path() const {
  return impl_->path;
}
std::string GgufFile::file_name() const {
  return std::filesystem::path(impl_->path).filename().string();
}
uint32_t GgufFile::version() const {
  return impl_->version;
}
uint64_t GgufFile::alignment() const {
  return impl_->alignment;
}
const std::map<std::string, GgufValue>& GgufFile::metadata() const {
  return impl_->metadata;
}
const std::vector<GgufTensorInfo>& GgufFile::tensors() const {
  return impl_->tensors;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = impl_->metadata.find(key);
  return it == impl_->metadata.end() ? nullptr : &it->second;
}

namespace {

Status missing(const std::string& file, const std::string& key) {
  return not_found(file + ": missing metadata key '" + key + "'");
}
Status wrong_type(const std::string& file, const std::string& key, const char* expected, const GgufValue& v) {
  std::string found = gguf_value_type_name(v.type);
  if (v.type == GgufValueType::kArray) found += std::string(" of ") + gguf_value_type_name(v.elem_type);
  return invalid_argument(file + ": metadata key '" + key + "': expected " + expected + ", found " + found);
}

}  // namespace

Result<int64_t> GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return missing(path(), key);
  if (!v->is_integer() || v->type == GgufValueType::kBool) return wrong_type(path(), key, "an integer", *v);
  if (v->type == GgufValueType::kU64 && v->u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return invalid_argument(path() + ": metadata key '" + key + "': " + std::to_string(v->u) +
                            " is too large");
  return v->i;
}

Result<double> GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return missing(path(), key);
  if (v->is_float()) return v->f;
  if (v->is_integer() && v->type != GgufValueType::kBool) return static_cast<double>(v->i);
  return wrong_type(path(), key, "a number", *v);
}

Result<bool> GgufFile::get_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return missing(path(), key);
  if (v->type != GgufValueType::kBool) return wrong_type(path(), key, "a bool", *v);
  return v->i != 0;
}

Result<std::string> GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return missing(path(), key);
  if (v->type != GgufValueType::kString) return wrong_type(path(), key, "a string", *v);
  return v->s;
}

Result<const std::vector<std::string>*> GgufFile::get_string_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return missing(path(), key);
  if (v->type != GgufValueType::kArray || v->elem_type != GgufValueType::kString)
    return wrong_type(path(), key, "an array of string", *v);
  return &v->strings;
}

Result<const std::vector<int64_t>*> GgufFile::get_int_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return missing(path(), key);
  GgufValue probe;
  probe.type = v->elem_type;
  if (v->type != GgufValueType::kArray || !probe.is_integer())
    return wrong_type(path(), key, "an array of integers", *v);
  return &v->ints;
}

Result<const std::vector<double>*> GgufFile::get_float_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return missing(path(), key);
  if (v->type != GgufValueType::kArray ||
      (v->elem_type != GgufValueType::kF32 && v->elem_type != GgufValueType::kF64))
    return wrong_type(path(), key, "an array of f32", *v);
  return &v->floats;
}

Result<int64_t> GgufFile::get_int_or(const std::string& key, int64_t fallback) const {
  return find(key) ? get_int(key) : Result<int64_t>(fallback);
}
Result<double> GgufFile::get_float_or(const std::string& key, double fallback) const {
  return find(key) ? get_float(key) : Result<double>(fallback);
}
Result<bool> GgufFile::get_bool_or(const std::string& key, bool fallback) const {
  return find(key) ? get_bool(key) : Result<bool>(fallback);
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = impl_->by_name.find(name);
  return it == impl_->by_name.end() ? nullptr : &impl_->tensors[it->second];
}

Result<const GgufTensorInfo*> GgufFile::tensor(const std::string& name, const Shape& expected) const {
  const GgufTensorInfo* t = find_tensor(name);
  if (!t)
    return not_found(path() + ": tensor '" + name + "' not found (" + std::to_string(impl_->tensors.size()) +
                     " tensors)");
  if (t->shape() != expected)
    return invalid_argument(path() + ": tensor '" + name + "': field 'shape': expected " +
                            expected.to_string() + ", found " + t->shape().to_string());
  return t;
}

Result<GgufTensorInfo> GgufFile::tensor_rows(const std::string& name, int64_t r0, int64_t r1) const {
  const GgufTensorInfo* t = find_tensor(name);
  if (!t)
    return not_found(path() + ": tensor '" + name + "' not found (" + std::to_string(impl_->tensors.size()) +
                     " tensors)");
  const int64_t n = t->ne.back();
  if (r0 < 0 || r1 < r0 || r1 > n)
    return invalid_argument(path() + ": tensor '" + name + "': field 'rows': [" + std::to_string(r0) + ", " +
                            std::to_string(r1) + ") outside [0, " + std::to_string(n) + ")");
  const size_t row_bytes = t->bytes / static_cast<size_t>(n);  // n > 0 and bytes = n * row bytes (open())
  GgufTensorInfo out = *t;
  out.ne.back() = r1 - r0;
  out.bytes = row_bytes * static_cast<size_t>(r1 - r0);
  out.data = t->data + row_bytes * static_cast<size_t>(r0);
  return out;
}

Result<HostTensor> GgufFile::read_cols(const std::string& name, int64_t c0, int64_t c1) const {
  const GgufTensorInfo* t = find_tensor(name);
  if (!t)
    return not_found(path() + ": tensor '" + name + "' not found (" + std::to_string(impl_->tensors.size()) +
                     " tensors)");
  const std::string what = path() + ": tensor '" + name + "': field 'cols': ";
  if (t->ne.size() != 2) return invalid_argument(what + "a column slice needs a 2-D tensor, found " + t->shape().to_string());
  const int64_t k = t->ne[0], n = t->ne[1], blk = quant::gguf_block_elems(t->type);
  if (c0 < 0 || c1 < c0 || c1 > k)
    return invalid_argument(what + "[" + std::to_string(c0) + ", " + std::to_string(c1) + ") outside [0, " +
                            std::to_string(k) + ")");
  if (c0 % blk != 0 || (c1 % blk != 0 && c1 != k))
    return invalid_argument(what + "[" + std::to_string(c0) + ", " + std::to_string(c1) + ") does not fall on " +
                            quant::gguf_type_name(t->type) + " block boundaries (" + std::to_string(blk) +
                            " columns)");
  const size_t bb = static_cast<size_t>(quant::gguf_block_bytes(t->type));
  const size_t row_bytes = t->bytes / static_cast<size_t>(n);
  const size_t b0 = static_cast<size_t>(c0 / blk) * bb, len = static_cast<size_t>((c1 - c0) / blk) * bb;
  HostTensor out(DType::kU8, Shape{n, static_cast<int64_t>(len)});
  for (int64_t r = 0; r < n; ++r)
    std::memcpy(out.data<uint8_t>() + static_cast<size_t>(r) * len, t->data + static_cast<size_t>(r) * row_bytes + b0, len);
  return out;
}

}  // namespace xinfer::model
