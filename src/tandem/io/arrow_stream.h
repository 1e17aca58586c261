// Apache Arrow IPC stream files as HF `datasets` writes them (Dataset.save_to_disk:
// <dir>/data-NNNNN-of-NNNNN.arrow plus state.json), read without pyarrow: the flatbuffer
// metadata (Schema, RecordBatch messages) through the flatbuffers library, the column buffers
// straight from the mapped file. Enough of the format for tabular text data: columns of utf8 /
// large_utf8 strings, signed integers, and lists (list / large_list) of strings; uncompressed,
// little-endian, no dictionaries. Anything else is an Error naming the file and the column.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::io {

struct ArrowColumn {
  enum class Kind { kString, kInt, kStringList };
  std::string name;
  Kind kind = Kind::kString;
  std::vector<std::string> strings;             // kString
  std::vector<std::int64_t> ints;               // kInt
  std::vector<std::vector<std::string>> lists;  // kStringList
};

struct ArrowTable {
  std::string source;  // file or folder, for messages
  std::int64_t num_rows = 0;
  std::vector<ArrowColumn> columns;
  // Throws Error naming the source when the column is missing or of another kind.
  const ArrowColumn& column(const std::string& name, ArrowColumn::Kind kind) const;
};

// One IPC stream file (every record batch appended in order).
ArrowTable read_arrow_stream(const std::string& path);

// A `datasets` save_to_disk folder: the files of state.json's "_data_files", in order.
ArrowTable read_hf_dataset_dir(const std::string& dir);

}  // namespace tandem::io
