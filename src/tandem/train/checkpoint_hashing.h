// XXH64 of a checkpoint's files, computed once across the ranks: hashing every file is the
// expensive part of saving a checkpoint (its manifest) and of choosing one to load (the
// manifest's check). One rank alone would read the whole checkpoint while the others wait, and
// every rank alone would read it W times over from the file system they share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tandem/dist/communicator.h"

namespace tandem::train {

struct FileToHash {
  std::string name;  // relative to the checkpoint directory, already checked to stay inside it
  std::uint64_t bytes = 0;
};

struct SharedDigests {
  std::vector<std::string> digests;   // 16 hex digits per file, in the order given
  std::uint64_t bytes_read_here = 0;  // this rank's share of the reading
};

// Which rank hashes each file at `world` ranks: a shard of as many writers as there are ranks
// (`.../shard-R-of-W.safetensors`, W = world) by rank R, the one that writes it on a save (its
// page cache holds it, on its own node) and reads it first on a resume at the same W; the other
// files shared by size (dist::share_by_size).
std::vector<int> hashing_ranks(const std::vector<FileToHash>& files, int world);

// The same `files` on every rank: each file is hashed by one rank (hashing_ranks) and every rank
// gets all digests (collective). A file that cannot be read is an error on every rank, naming the
// file.
SharedDigests hash_files_shared(const std::string& dir, const std::vector<FileToHash>& files,
                                dist::Communicator& comm);

}  // namespace tandem::train
