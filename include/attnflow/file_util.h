// attnflow/file_util.h — whole-file reads, guarded read-only mappings
// (FileBytes), atomic (all-or-nothing) writes of files and export
// directories, path joining, and UTF-8 validation of file contents.
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

// Creates or replaces the export directory `dir` as a whole. `fill` writes
// plain files into a fresh temporary directory next to it ("<parent>/.<name>
// .tmp-<pid>-<n>"; missing parents are created), which then takes `dir`'s
// place: by rename(2) when `dir` is absent or empty, else by
// renameat2(RENAME_EXCHANGE), after hard-linking into it every entry of `dir`
// whose name does not end in `ext` (another kind of export, the user's own
// files: kept); the files ending in `ext` are the old export and are removed
// with the old directory. A `dir` holding a subdirectory is refused
// (kIoError) before `fill` runs. On any error, and on SIGINT/SIGTERM/SIGHUP,
// the temporary directory is removed and `dir` is left as it was: a reader
// never sees the stages of an old and a new export mixed.
Status WriteDirectoryAtomic(const std::string& dir, const std::string& ext,
                            const std::function<Status(const std::string& tmp_dir)>& fill);

// Convenience: atomically writes exactly `bytes`.
Status WriteFileAtomic(const std::string& path, std::string_view bytes);

// kInvalidArgument "<op>: the output '<output>' is the input file '<input>'
// (same device and inode); write to another path" when `output` names the
// same file as `input` (compared by device and inode after following
// symlinks: also through a symlink, a hard link or another spelling of the
// path); Ok when it does not or when either path does not exist. A command
// that reads `input` while it writes `output` calls this before writing, so
// that it never replaces its own input.
Status CheckOutputIsNotInput(const std::string& op, const std::string& input,
                             const std::string& output);

// Reads a whole regular file. kIoError if it cannot be opened or read, or is a
// directory.
Result<std::vector<uint8_t>> ReadFileBytes(const std::string& path);
Result<std::string> ReadFileString(const std::string& path);

// The bytes of a file image, from one of two sources: a read-only private
// mapping of a whole regular file (Map) or an owned buffer (Own; tests and
// fuzzing). An empty file maps to nothing: data() == nullptr, size() == 0.
// Move-only; a move keeps data() at the same address (views into it stay
// valid); unmaps when destroyed.
//
// Mapped files are guarded: the mapping is registered with a process-wide
// SIGBUS handler (installed on first use). If the file is truncated while it
// is mapped (a re-download, `cp` over it, a full disk), touching the lost
// pages would kill the process with SIGBUS (exit 135, no message); instead
// the handler writes "attnflow: error: '<path>': the file was truncated while
// in use (read fault at byte N of M) ..." to stderr, removes the temporary of
// every output still being written (WriteFileAtomic, WriteDirectoryAtomic)
// and ends the process with exit code kMappedFileChangedExit. A fault outside every guarded mapping is
// passed on to the previous handler (or the default action). Bytes rewritten
// in place without a size change are not detected (docs/errors.md, row H1).
// MAP_POPULATE reads the whole file in at Map time.
class FileBytes {
 public:
  // Maps `path` read-only. Directories, FIFOs, devices and sockets are refused
  // before they are opened (a FIFO without a writer would block open(2)) and
  // again after the O_NONBLOCK open. Errors are kIoError, "<prefix>is a
  // directory, not a <kind> file", "<prefix>is not a regular file, not a
  // <kind> file", "<prefix>cannot open|stat|mmap ...".
  static Result<FileBytes> Map(const std::string& path, const std::string& prefix,
                               const std::string& kind);
  static FileBytes Own(std::vector<uint8_t> bytes);

  FileBytes() = default;
  FileBytes(FileBytes&& o) noexcept;
  FileBytes& operator=(FileBytes&& o) noexcept;
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;
  ~FileBytes();

  const uint8_t* data() const;
  size_t size() const;

 private:
  void Unmap();
  void* base_ = nullptr;  // the mapping (Map), or nullptr
  size_t map_size_ = 0;
  int guard_slot_ = -1;          // slot in the SIGBUS guard table, or -1
  std::vector<uint8_t> owned_;   // Own
};

// Exit code of a process whose guarded mapping lost its file's bytes (see
// FileBytes): 2, the CLI's code for an unreadable or invalid input file.
inline constexpr int kMappedFileChangedExit = 2;

// `dir` + "/" + `name` (no second '/' when `dir` ends in one; `name` alone
// when `dir` is empty).
std::string JoinPath(const std::string& dir, const std::string& name);

// Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF, no
// truncated sequences (the rule of the safetensors and GGUF formats).
bool IsValidUtf8(std::string_view s);

}  // namespace attnflow
