#include "tandem/io/arrow_stream.h"

#include <flatbuffers/flatbuffers.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/core/mapped_file.h"
#include "tandem/core/path_inside.h"
#include "tandem/io/json.h"

namespace tandem::io {
namespace {

// Field ids of Arrow's Message.fbs / Schema.fbs tables (vtable slot = 4 + 2 * id; a union takes
// two ids, its type byte first).
namespace message {
constexpr flatbuffers::voffset_t kVersion = 4, kHeaderType = 6, kHeader = 8, kBodyLength = 10;
}
namespace schema {
constexpr flatbuffers::voffset_t kEndianness = 4, kFields = 6;
}
namespace field {
constexpr flatbuffers::voffset_t kName = 4, kTypeType = 8, kType = 10, kDictionary = 12,
                                 kChildren = 14;
}
namespace int_type {
constexpr flatbuffers::voffset_t kBitWidth = 4, kIsSigned = 6;
}
namespace record_batch {
constexpr flatbuffers::voffset_t kLength = 4, kNodes = 6, kBuffers = 8, kCompression = 10;
}
// MessageHeader and Type union values.
constexpr std::uint8_t kHeaderSchema = 1, kHeaderDictionaryBatch = 2, kHeaderRecordBatch = 3;
constexpr std::uint8_t kTypeInt = 2, kTypeUtf8 = 5, kTypeList = 12, kTypeLargeUtf8 = 20,
                       kTypeLargeList = 21;
constexpr std::int16_t kMetadataV4 = 3;  // MetadataVersion V4 and later share this layout

struct FieldNode {  // Arrow's FieldNode / Buffer structs: two little-endian int64s
  std::int64_t length, null_count;
};
struct BufferSpec {
  std::int64_t offset, length;
};

struct ColumnType {
  std::string name;
  std::uint8_t type = 0;
  int int_bits = 64;
  std::uint8_t child_type = 0;  // lists: the item type
};

const flatbuffers::Table* table_at(const flatbuffers::Table* t, flatbuffers::voffset_t slot) {
  return t->GetPointer<const flatbuffers::Table*>(slot);
}

class StreamReader {
 public:
  explicit StreamReader(const std::string& path) : file_(path), path_(path) {}

  ArrowTable read() {
    ArrowTable table;
    table.source = path_;
    bool have_schema = false;
    while (true) {
      const flatbuffers::Table* msg = next_message();
      if (msg == nullptr) break;
      const auto header_type = msg->GetField<std::uint8_t>(message::kHeaderType, 0);
      const std::int64_t body_length = msg->GetField<std::int64_t>(message::kBodyLength, 0);
      TANDEM_CHECK(body_length >= 0 && static_cast<std::uint64_t>(body_length) <= remaining(),
                   "{}: message at byte {} declares a body of {} bytes past the end of the file",
                   path_, message_start_, body_length);
      const std::uint8_t* body = file_.data() + pos_;
      pos_ += static_cast<std::size_t>(body_length);
      const flatbuffers::Table* header = table_at(msg, message::kHeader);
      TANDEM_CHECK(header != nullptr, "{}: message at byte {} has no header", path_,
                   message_start_);
      if (header_type == kHeaderSchema) {
        TANDEM_CHECK(!have_schema, "{}: a second schema at byte {}", path_, message_start_);
        read_schema(header, table);
        have_schema = true;
      } else if (header_type == kHeaderRecordBatch) {
        TANDEM_CHECK(have_schema, "{}: record batch before the schema", path_);
        read_batch(header, body, static_cast<std::size_t>(body_length), table);
      } else if (header_type == kHeaderDictionaryBatch) {
        core::fail("{}: dictionary-encoded columns are not supported", path_);
      } else {
        core::fail("{}: unsupported message type {} at byte {}", path_, header_type,
                   message_start_);
      }
    }
    TANDEM_CHECK(have_schema, "{}: no schema message (not an Arrow IPC stream?)", path_);
    return table;
  }

 private:
  std::size_t remaining() const { return file_.size() - pos_; }

  std::int32_t read_i32() {
    TANDEM_CHECK(remaining() >= 4, "{}: truncated at byte {}", path_, pos_);
    std::int32_t v;
    std::memcpy(&v, file_.data() + pos_, 4);
    pos_ += 4;
    return v;
  }

  // The next message's metadata, verified, or nullptr at the end of the stream.
  const flatbuffers::Table* next_message() {
    message_start_ = pos_;
    if (remaining() == 0) return nullptr;  // a stream may end without the end marker
    std::int32_t length = read_i32();
    if (length == -1) length = read_i32();  // continuation marker (format 0.15 and later)
    if (length == 0) return nullptr;        // end-of-stream marker
    TANDEM_CHECK(length > 0 && static_cast<std::size_t>(length) <= remaining(),
                 "{}: message at byte {} declares {} metadata bytes, {} remain", path_,
                 message_start_, length, remaining());
    // An 8-aligned copy, so that the verifier's alignment checks hold whatever the file offset.
    metadata_.assign((static_cast<std::size_t>(length) + 7) / 8, 0);
    std::memcpy(metadata_.data(), file_.data() + pos_, static_cast<std::size_t>(length));
    pos_ += static_cast<std::size_t>(length);
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(metadata_.data());
    flatbuffers::Verifier verifier(bytes, static_cast<std::size_t>(length));
    const auto* msg = flatbuffers::GetRoot<flatbuffers::Table>(bytes);
    // The root offset lies in the buffer (length >= 4); every table is bounds-checked from there.
    bool ok = length >= 4 && verify_message(verifier, msg);
    TANDEM_CHECK(ok, "{}: message at byte {}: malformed flatbuffer metadata", path_,
                 message_start_);
    const auto version = msg->GetField<std::int16_t>(message::kVersion, 0);
    TANDEM_CHECK(version >= kMetadataV4, "{}: Arrow metadata version {} is older than V4", path_,
                 version);
    return msg;
  }

  static bool verify_field(flatbuffers::Verifier& v, const flatbuffers::Table* f, int depth) {
    if (depth > 8 || !f->VerifyTableStart(v) || !f->VerifyOffset(v, field::kName) ||
        !v.VerifyString(f->GetPointer<const flatbuffers::String*>(field::kName)) ||
        !f->VerifyField<std::uint8_t>(v, field::kTypeType, 1) ||
        !f->VerifyOffset(v, field::kType) || !f->VerifyOffset(v, field::kChildren)) {
      return false;
    }
    if (const auto* type = table_at(f, field::kType)) {
      if (!type->VerifyTableStart(v)) return false;
      if (f->GetField<std::uint8_t>(field::kTypeType, 0) == kTypeInt &&
          (!type->VerifyField<std::int32_t>(v, int_type::kBitWidth, 4) ||
           !type->VerifyField<std::uint8_t>(v, int_type::kIsSigned, 1))) {
        return false;
      }
      v.EndTable();
    }
    using Children = flatbuffers::Vector<flatbuffers::Offset<flatbuffers::Table>>;
    if (const auto* children = f->GetPointer<const Children*>(field::kChildren)) {
      if (!v.VerifyVector(children)) return false;
      for (flatbuffers::uoffset_t i = 0; i < children->size(); ++i) {
        if (!verify_field(v, children->Get(i), depth + 1)) return false;
      }
    }
    return v.EndTable();
  }

  static bool verify_message(flatbuffers::Verifier& v, const flatbuffers::Table* msg) {
    if (!msg->VerifyTableStart(v) || !msg->VerifyField<std::int16_t>(v, message::kVersion, 2) ||
        !msg->VerifyField<std::uint8_t>(v, message::kHeaderType, 1) ||
        !msg->VerifyOffset(v, message::kHeader) ||
        !msg->VerifyField<std::int64_t>(v, message::kBodyLength, 8)) {
      return false;
    }
    const auto* header = table_at(msg, message::kHeader);
    if (header != nullptr) {
      const auto type = msg->GetField<std::uint8_t>(message::kHeaderType, 0);
      if (!header->VerifyTableStart(v)) return false;
      if (type == kHeaderSchema) {
        using Fields = flatbuffers::Vector<flatbuffers::Offset<flatbuffers::Table>>;
        if (!header->VerifyField<std::int16_t>(v, schema::kEndianness, 2) ||
            !header->VerifyOffset(v, schema::kFields)) {
          return false;
        }
        if (const auto* fields = header->GetPointer<const Fields*>(schema::kFields)) {
          if (!v.VerifyVector(fields)) return false;
          for (flatbuffers::uoffset_t i = 0; i < fields->size(); ++i) {
            if (!verify_field(v, fields->Get(i), 0)) return false;
          }
        }
      } else if (type == kHeaderRecordBatch) {
        using Structs = flatbuffers::Vector<const FieldNode*>;
        if (!header->VerifyField<std::int64_t>(v, record_batch::kLength, 8) ||
            !header->VerifyOffset(v, record_batch::kNodes) ||
            !header->VerifyOffset(v, record_batch::kBuffers) ||
            !v.VerifyVector(header->GetPointer<const Structs*>(record_batch::kNodes)) ||
            !v.VerifyVector(header->GetPointer<const Structs*>(record_batch::kBuffers))) {
          return false;
        }
      }
      if (!v.EndTable()) return false;
    }
    return v.EndTable();
  }

  ColumnType column_type(const flatbuffers::Table* f, bool child) const {
    ColumnType c;
    const auto* name = f->GetPointer<const flatbuffers::String*>(field::kName);
    c.name = name ? name->str() : "";
    TANDEM_CHECK(f->GetPointer<const flatbuffers::Table*>(field::kDictionary) == nullptr,
                 "{}: column '{}' is dictionary-encoded (not supported)", path_, c.name);
    c.type = f->GetField<std::uint8_t>(field::kTypeType, 0);
    if (c.type == kTypeInt) {
      const auto* t = table_at(f, field::kType);
      TANDEM_CHECK(t != nullptr, "{}: column '{}': integer type without its table", path_, c.name);
      c.int_bits = t->GetField<std::int32_t>(int_type::kBitWidth, 0);
      bool is_signed = t->GetField<std::uint8_t>(int_type::kIsSigned, 0) != 0;
      TANDEM_CHECK(is_signed && (c.int_bits == 8 || c.int_bits == 16 || c.int_bits == 32 ||
                                 c.int_bits == 64),
                   "{}: column '{}': {}int{} is not supported", path_, c.name, is_signed ? "" : "u",
                   c.int_bits);
      return c;
    }
    if (c.type == kTypeUtf8 || c.type == kTypeLargeUtf8) return c;
    using Children = flatbuffers::Vector<flatbuffers::Offset<flatbuffers::Table>>;
    if (!child && (c.type == kTypeList || c.type == kTypeLargeList)) {
      const auto* children = f->GetPointer<const Children*>(field::kChildren);
      TANDEM_CHECK(children != nullptr && children->size() == 1,
                   "{}: list column '{}' needs exactly one child field", path_, c.name);
      ColumnType item = column_type(children->Get(0), true);
      TANDEM_CHECK(item.type == kTypeUtf8 || item.type == kTypeLargeUtf8,
                   "{}: column '{}': only lists of strings are supported", path_, c.name);
      c.child_type = item.type;
      return c;
    }
    core::fail("{}: column '{}' has Arrow type {} (supported: utf8, large_utf8, int, list<utf8>)",
               path_, c.name, c.type);
  }

  void read_schema(const flatbuffers::Table* schema, ArrowTable& table) {
    TANDEM_CHECK(schema->GetField<std::int16_t>(schema::kEndianness, 0) == 0,
                 "{}: big-endian Arrow data is not supported", path_);
    using Fields = flatbuffers::Vector<flatbuffers::Offset<flatbuffers::Table>>;
    const auto* fields = schema->GetPointer<const Fields*>(schema::kFields);
    TANDEM_CHECK(fields != nullptr && fields->size() > 0, "{}: schema without fields", path_);
    for (flatbuffers::uoffset_t i = 0; i < fields->size(); ++i) {
      types_.push_back(column_type(fields->Get(i), false));
      ArrowColumn col;
      col.name = types_.back().name;
      const auto t = types_.back().type;
      col.kind = t == kTypeInt                             ? ArrowColumn::Kind::kInt
                 : (t == kTypeList || t == kTypeLargeList) ? ArrowColumn::Kind::kStringList
                                                           : ArrowColumn::Kind::kString;
      table.columns.push_back(std::move(col));
    }
  }

  // Cursor over one record batch's field nodes and buffers (depth-first, as written).
  struct Batch {
    const flatbuffers::Vector<const FieldNode*>* nodes;
    const flatbuffers::Vector<const BufferSpec*>* buffers;
    const std::uint8_t* body;
    std::size_t body_length;
    flatbuffers::uoffset_t next_node = 0, next_buffer = 0;
  };

  FieldNode take_node(Batch& b, const std::string& column) const {
    TANDEM_CHECK(b.next_node < b.nodes->size(), "{}: column '{}': missing field node", path_,
                 column);
    const FieldNode* n = b.nodes->Get(b.next_node++);
    TANDEM_CHECK(n->length >= 0 && n->null_count == 0,
                 "{}: column '{}': {} null values (nulls are not supported)", path_, column,
                 n->null_count);
    return *n;
  }

  std::pair<const std::uint8_t*, std::size_t> take_buffer(Batch& b,
                                                          const std::string& column) const {
    TANDEM_CHECK(b.next_buffer < b.buffers->size(), "{}: column '{}': missing buffer", path_,
                 column);
    const BufferSpec* s = b.buffers->Get(b.next_buffer++);
    TANDEM_CHECK(
        s->offset >= 0 && s->length >= 0 &&
            static_cast<std::uint64_t>(s->offset) + static_cast<std::uint64_t>(s->length) <=
                b.body_length,
        "{}: column '{}': buffer [{}, +{}) outside the message body of {} bytes", path_, column,
        s->offset, s->length, b.body_length);
    return {b.body + s->offset, static_cast<std::size_t>(s->length)};
  }

  template <typename Offset>
  std::vector<Offset> read_offsets(std::pair<const std::uint8_t*, std::size_t> buf,
                                   std::int64_t count, const std::string& column) const {
    const auto n = static_cast<std::size_t>(count) + 1;
    TANDEM_CHECK(buf.second >= n * sizeof(Offset),
                 "{}: column '{}': offsets buffer of {} bytes for {} values", path_, column,
                 buf.second, count);
    std::vector<Offset> out(n);
    std::memcpy(out.data(), buf.first, n * sizeof(Offset));
    for (std::size_t i = 1; i < n; ++i) {
      TANDEM_CHECK(out[i] >= out[i - 1] && out[0] >= 0, "{}: column '{}': offsets not increasing",
                   path_, column);
    }
    return out;
  }

  // A string child (or column) of `count` values, appended to out.
  void read_strings(Batch& b, std::uint8_t type, const std::string& column,
                    std::vector<std::string>& out) const {
    FieldNode node = take_node(b, column);
    take_buffer(b, column);  // validity: all valid (null_count == 0)
    auto offsets_buf = take_buffer(b, column);
    auto data = take_buffer(b, column);
    auto emit = [&](const auto& offsets) {
      TANDEM_CHECK(static_cast<std::uint64_t>(offsets.back()) <= data.second,
                   "{}: column '{}': string data of {} bytes, offsets reach {}", path_, column,
                   data.second, offsets.back());
      for (std::int64_t i = 0; i < node.length; ++i) {
        out.emplace_back(reinterpret_cast<const char*>(data.first) + offsets[i],
                         static_cast<std::size_t>(offsets[i + 1] - offsets[i]));
      }
    };
    if (type == kTypeUtf8) {
      emit(read_offsets<std::int32_t>(offsets_buf, node.length, column));
    } else {
      emit(read_offsets<std::int64_t>(offsets_buf, node.length, column));
    }
  }

  void read_batch(const flatbuffers::Table* rb, const std::uint8_t* body, std::size_t body_length,
                  ArrowTable& table) {
    TANDEM_CHECK(table_at(rb, record_batch::kCompression) == nullptr,
                 "{}: compressed record batches are not supported", path_);
    Batch b{rb->GetPointer<const flatbuffers::Vector<const FieldNode*>*>(record_batch::kNodes),
            rb->GetPointer<const flatbuffers::Vector<const BufferSpec*>*>(record_batch::kBuffers),
            body, body_length};
    TANDEM_CHECK(b.nodes != nullptr && b.buffers != nullptr,
                 "{}: record batch without nodes or buffers", path_);
    const std::int64_t rows = rb->GetField<std::int64_t>(record_batch::kLength, 0);
    for (std::size_t c = 0; c < types_.size(); ++c) {
      const ColumnType& t = types_[c];
      ArrowColumn& col = table.columns[c];
      if (t.type == kTypeInt) {
        FieldNode node = take_node(b, t.name);
        take_buffer(b, t.name);  // validity
        auto values = take_buffer(b, t.name);
        const std::size_t width = static_cast<std::size_t>(t.int_bits) / 8;
        TANDEM_CHECK(values.second >= static_cast<std::size_t>(node.length) * width,
                     "{}: column '{}': {} bytes for {} values", path_, t.name, values.second,
                     node.length);
        for (std::int64_t i = 0; i < node.length; ++i) {
          const std::uint8_t* p = values.first + static_cast<std::size_t>(i) * width;
          std::int64_t v = 0;
          if (width == 1) v = static_cast<std::int8_t>(*p);
          if (width == 2)
            v = [&] {
              std::int16_t x;
              std::memcpy(&x, p, 2);
              return x;
            }();
          if (width == 4)
            v = [&] {
              std::int32_t x;
              std::memcpy(&x, p, 4);
              return x;
            }();
          if (width == 8) std::memcpy(&v, p, 8);
          col.ints.push_back(v);
        }
        TANDEM_CHECK(node.length == rows, "{}: column '{}' has {} rows, the batch {}", path_,
                     t.name, node.length, rows);
      } else if (t.type == kTypeUtf8 || t.type == kTypeLargeUtf8) {
        std::size_t before = col.strings.size();
        read_strings(b, t.type, t.name, col.strings);
        TANDEM_CHECK(static_cast<std::int64_t>(col.strings.size() - before) == rows,
                     "{}: column '{}' has {} rows, the batch {}", path_, t.name,
                     col.strings.size() - before, rows);
      } else {  // list of strings
        FieldNode node = take_node(b, t.name);
        take_buffer(b, t.name);  // validity
        auto offsets_buf = take_buffer(b, t.name);
        std::vector<std::int64_t> offsets;
        if (t.type == kTypeList) {
          for (auto o : read_offsets<std::int32_t>(offsets_buf, node.length, t.name))
            offsets.push_back(o);
        } else {
          offsets = read_offsets<std::int64_t>(offsets_buf, node.length, t.name);
        }
        std::vector<std::string> items;
        read_strings(b, t.child_type, t.name, items);
        TANDEM_CHECK(static_cast<std::uint64_t>(offsets.back()) <= items.size(),
                     "{}: column '{}': list offsets reach {} of {} items", path_, t.name,
                     offsets.back(), items.size());
        for (std::int64_t i = 0; i < node.length; ++i) {
          col.lists.emplace_back(items.begin() + offsets[i], items.begin() + offsets[i + 1]);
        }
        TANDEM_CHECK(node.length == rows, "{}: column '{}' has {} rows, the batch {}", path_,
                     t.name, node.length, rows);
      }
    }
    table.num_rows += rows;
  }

  core::MappedFile file_;
  std::string path_;
  std::size_t pos_ = 0;
  std::size_t message_start_ = 0;
  std::vector<std::uint64_t> metadata_;
  std::vector<ColumnType> types_;
};

void append_table(ArrowTable& into, ArrowTable&& part) {
  if (into.columns.empty()) {
    std::string source = into.source;
    into = std::move(part);
    into.source = source;
    return;
  }
  TANDEM_CHECK(into.columns.size() == part.columns.size(), "{}: files with different schemas",
               into.source);
  for (std::size_t c = 0; c < into.columns.size(); ++c) {
    auto& a = into.columns[c];
    auto& b = part.columns[c];
    TANDEM_CHECK(a.name == b.name && a.kind == b.kind, "{}: files with different schemas",
                 into.source);
    a.strings.insert(a.strings.end(), b.strings.begin(), b.strings.end());
    a.ints.insert(a.ints.end(), b.ints.begin(), b.ints.end());
    a.lists.insert(a.lists.end(), b.lists.begin(), b.lists.end());
  }
  into.num_rows += part.num_rows;
}

}  // namespace

const ArrowColumn& ArrowTable::column(const std::string& name, ArrowColumn::Kind kind) const {
  for (const auto& c : columns) {
    if (c.name != name) continue;
    TANDEM_CHECK(c.kind == kind, "{}: column '{}' is not of the expected type", source, name);
    return c;
  }
  core::fail("{}: no column '{}'", source, name);
}

ArrowTable read_arrow_stream(const std::string& path) { return StreamReader(path).read(); }

ArrowTable read_hf_dataset_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string state_path = (fs::path(dir) / "state.json").string();
  TANDEM_CHECK(fs::exists(state_path), "{}: no state.json (not a datasets save_to_disk folder)",
               dir);
  std::vector<std::string> files;
  const nlohmann::json state = read_json_file(state_path);
  const auto data_files = json_field<nlohmann::json>(state, "_data_files", state_path);
  TANDEM_CHECK(data_files.is_array(), "{}: _data_files is not a list", state_path);
  for (const auto& f : data_files) {
    // A file name read from a file stays inside the dataset's folder (docs/reliability.md).
    files.push_back(core::path_inside(
        dir, json_field<std::string>(f, "filename", state_path + ": _data_files entry"),
        state_path));
  }
  TANDEM_CHECK(!files.empty(), "{}: _data_files is empty", state_path);
  ArrowTable table;
  table.source = dir;
  for (const auto& f : files) append_table(table, read_arrow_stream(f));
  return table;
}

}  // namespace tandem::io
