// attnflow/file_util.h — whole-file reads, read-only mappings, atomic
// (all-or-nothing) writes, and UTF-8 validation of file contents.
//
// Invariants:
//  * WriteFileAtomic never leaves a partial file at `path`: data goes to a
//    temporary file in the same directory which is flushed, fsync'ed and then
//    rename(2)d over `path`. On any failure the temporary file is removed and
//    an existing file at `path` is left untouched.
//  * Errors are returned as Status (kIoError for anything the filesystem
//    refuses) with a message naming the path and the failing step; nothing
//    throws.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "attnflow/status.h"

namespace attnflow {

// Creates or replaces `path` atomically. `writer` receives a FILE* opened for
// binary writing on a temporary file "<dir>/.<name>.tmp-<pid>-<n>" and returns
// Ok to commit or an error to abort; its error is returned unchanged. Write
// errors on the FILE* (short writes, ENOSPC at flush/close) are detected here
// even if `writer` ignored them. Exceptions thrown by `writer` are caught and
// reported as kInternal (the temporary file is removed).
//
// Details: a new file gets mode 0666 & ~umask (like fopen "w"); replacing an
// existing regular file keeps that file's permission bits. If `path` is a
// symlink, the link itself is replaced. `path` naming an existing directory,
// a parent that does not exist or is not a directory, or an unwritable
// location give kIoError before `writer` is called.
Status WriteFileAtomic(const std::string& path,
                       const std::function<Status(std::FILE*)>& writer);

// Convenience: atomically writes exactly `bytes`.
Status WriteFileAtomic(const std::string& path, std::string_view bytes);

// Reads a whole regular file. kIoError if it cannot be opened or read, or is a
// directory.
Result<std::vector<uint8_t>> ReadFileBytes(const std::string& path);
Result<std::string> ReadFileString(const std::string& path);

// A read-only private mapping of a whole regular file (an empty file maps to
// nothing: data() == nullptr, size() == 0). Move-only; unmaps when destroyed.
class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return static_cast<const uint8_t*>(base_); }
  size_t size() const { return size_; }

 private:
  friend Result<MappedFile> MapFileReadOnly(const std::string&, const std::string&,
                                            const std::string&);
  void* base_ = nullptr;
  size_t size_ = 0;
};

// Maps `path` read-only. Directories, FIFOs, devices and sockets are refused
// before they are opened (a FIFO without a writer would block open(2)) and
// again after the O_NONBLOCK open. Errors are kIoError, "<prefix>is a
// directory, not a <kind> file", "<prefix>is not a regular file, not a <kind>
// file", "<prefix>cannot open|stat|mmap ...".
Result<MappedFile> MapFileReadOnly(const std::string& path, const std::string& prefix,
                                   const std::string& kind);

// Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF, no
// truncated sequences (the rule of the safetensors and GGUF formats).
bool IsValidUtf8(std::string_view s);

}  // namespace attnflow
