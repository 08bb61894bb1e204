// file_util.cc — whole-file reads and atomic writes (see file_util.h).
//
// Invariant: WriteFileAtomic either renames a fully written, flushed and
// fsync'ed temporary file over the target, or removes the temporary file and
// leaves the target as it was. No exception escapes.
#include "attnflow/file_util.h"
#include "core/utf8.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <new>

namespace attnflow {
namespace {

std::string ErrnoString(int err) { return std::strerror(err); }

// Splits "a/b/c" into ("a/b", "c"); "c" into (".", "c"); "/c" into ("/", "c").
void SplitPath(const std::string& path, std::string* dir, std::string* base) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) {
    *dir = ".";
    *base = path;
  } else {
    *dir = slash == 0 ? "/" : path.substr(0, slash);
    *base = path.substr(slash + 1);
  }
}

std::atomic<uint64_t> g_tmp_counter{0};

// Removes the temporary file; used on every failure path.
void RemoveQuietly(const std::string& tmp) { ::unlink(tmp.c_str()); }

Status WriteError(const std::string& path, const std::string& what, int err) {
  return IoError("cannot write '" + path + "': " + what + ": " +
                 ErrnoString(err));
}

}  // namespace

Status WriteFileAtomic(const std::string& path,
                       const std::function<Status(std::FILE*)>& writer) {
  if (path.empty()) return IoError("cannot write '': empty path");
  std::string dir, base;
  SplitPath(path, &dir, &base);
  if (base.empty() || base == "." || base == "..") {
    return IoError("cannot write '" + path + "': path names a directory");
  }

  struct stat target_st;
  bool target_exists = false;
  if (::stat(path.c_str(), &target_st) == 0) {
    target_exists = true;
    if (S_ISDIR(target_st.st_mode)) {
      return IoError("cannot write '" + path + "': it is a directory");
    }
    if (!S_ISREG(target_st.st_mode)) {
      return IoError("cannot write '" + path +
                     "': it exists and is not a regular file (device, FIFO or socket); "
                     "refusing to replace it");
    }
  }
  struct stat dir_st;
  if (::stat(dir.c_str(), &dir_st) != 0) {
    return WriteError(path, "parent directory '" + dir + "'", errno);
  }
  if (!S_ISDIR(dir_st.st_mode)) {
    return IoError("cannot write '" + path + "': parent '" + dir +
                   "' is not a directory");
  }

  // Create a unique temporary file next to the target (same filesystem, so
  // rename is atomic). Keep the name well under NAME_MAX.
  const std::string stem = base.size() > 100 ? base.substr(0, 100) : base;
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    tmp = (dir == "/" ? std::string("/") : dir + "/") + "." + stem + ".tmp-" +
          std::to_string(::getpid()) + "-" +
          std::to_string(g_tmp_counter.fetch_add(1));
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) {
      return WriteError(path, "cannot create a file in '" + dir + "'", errno);
    }
  }
  if (fd < 0) {
    return IoError("cannot write '" + path +
                   "': no free temporary file name in '" + dir + "'");
  }
  if (target_exists && S_ISREG(target_st.st_mode)) {
    (void)::fchmod(fd, target_st.st_mode & 07777);  // best effort
  }
  std::FILE* f = ::fdopen(fd, "wb");
  if (f == nullptr) {
    const int err = errno;
    ::close(fd);
    RemoveQuietly(tmp);
    return WriteError(path, "fdopen of '" + tmp + "'", err);
  }

  Status st;
  try {
    st = writer(f);
  } catch (const std::bad_alloc&) {
    st = ResourceExhausted("cannot write '" + path + "': out of memory");
  } catch (const std::exception& e) {
    st = Status(StatusCode::kInternal,
                "cannot write '" + path + "': exception: " + e.what());
  } catch (...) {
    st = Status(StatusCode::kInternal,
                "cannot write '" + path + "': unknown exception");
  }
  if (!st.ok()) {
    std::fclose(f);
    RemoveQuietly(tmp);
    return st;
  }
  if (std::fflush(f) != 0 || std::ferror(f)) {
    const int err = errno;
    std::fclose(f);
    RemoveQuietly(tmp);
    return WriteError(path, "writing '" + tmp + "'", err);
  }
  if (::fsync(::fileno(f)) != 0) {
    const int err = errno;
    std::fclose(f);
    RemoveQuietly(tmp);
    return WriteError(path, "fsync of '" + tmp + "'", err);
  }
  if (std::fclose(f) != 0) {
    const int err = errno;
    RemoveQuietly(tmp);
    return WriteError(path, "closing '" + tmp + "'", err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    RemoveQuietly(tmp);
    return WriteError(path, "renaming '" + tmp + "' into place", err);
  }
  // Persist the rename itself; best effort (some filesystems refuse).
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
  return Status::Ok();
}

Status WriteFileAtomic(const std::string& path, std::string_view bytes) {
  return WriteFileAtomic(path, [&](std::FILE* f) -> Status {
    if (!bytes.empty() &&
        std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
      return WriteError(path, "short write", errno);
    }
    return Status::Ok();
  });
}

Result<std::vector<uint8_t>> ReadFileBytes(const std::string& path) {
  // O_NONBLOCK: opening a FIFO without a writer must not hang; non-regular
  // files are rejected right after.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return IoError("cannot open '" + path + "': " + ErrnoString(errno));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return IoError("cannot stat '" + path + "': " + ErrnoString(err));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return IoError("cannot read '" + path + "': it is a directory");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return IoError("cannot read '" + path + "': not a regular file (device, FIFO or socket)");
  }
  std::vector<uint8_t> out;
  try {
    // st_size is only a hint (/proc files report 0); read until EOF.
    out.resize(st.st_size > 0 ? static_cast<size_t>(st.st_size) + 1 : 4096);
    size_t used = 0;
    for (;;) {
      if (used == out.size()) out.resize(out.size() * 2);
      const ssize_t n = ::read(fd, out.data() + used, out.size() - used);
      if (n < 0) {
        if (errno == EINTR) continue;
        const int err = errno;
        ::close(fd);
        return IoError("cannot read '" + path + "': " + ErrnoString(err));
      }
      if (n == 0) break;
      used += static_cast<size_t>(n);
    }
    out.resize(used);
  } catch (const std::bad_alloc&) {
    ::close(fd);
    return ResourceExhausted("cannot read '" + path + "': out of memory");
  }
  ::close(fd);
  return out;
}

Result<std::string> ReadFileString(const std::string& path) {
  Result<std::vector<uint8_t>> r = ReadFileBytes(path);
  if (!r.ok()) return r.status();
  const std::vector<uint8_t>& b = r.value();
  try {
    return std::string(b.begin(), b.end());
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("cannot read '" + path + "': out of memory");
  }
}

MappedFile::MappedFile(MappedFile&& o) noexcept : base_(o.base_), size_(o.size_) {
  o.base_ = nullptr;
  o.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (base_ != nullptr) ::munmap(base_, size_);
    base_ = o.base_;
    size_ = o.size_;
    o.base_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (base_ != nullptr) ::munmap(base_, size_);
}

Result<MappedFile> MapFileReadOnly(const std::string& path, const std::string& prefix,
                                   const std::string& kind) {
  auto not_regular = [&](mode_t mode) {
    return IoError(prefix + (S_ISDIR(mode) ? "is a directory" : "is not a regular file") +
                   ", not a " + kind + " file");
  };
  struct stat pre;
  if (::stat(path.c_str(), &pre) == 0 && !S_ISREG(pre.st_mode)) return not_regular(pre.st_mode);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return IoError(prefix + "cannot open: " + ErrnoString(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return IoError(prefix + "cannot stat: " + ErrnoString(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return not_regular(st.st_mode);
  }
  MappedFile m;
  if (st.st_size > 0) {
    const size_t n = static_cast<size_t>(st.st_size);
    void* p = ::mmap(nullptr, n, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return IoError(prefix + "cannot mmap " + std::to_string(n) + " bytes: " + ErrnoString(err));
    }
    m.base_ = p;
    m.size_ = n;
  }
  ::close(fd);  // the mapping stays valid
  return m;
}

bool IsValidUtf8(std::string_view s) {
  char32_t cp;
  for (size_t i = 0; i < s.size();) {
    const int len = utf8::DecodeOne(s, i, &cp);
    if (len == 0) return false;
    i += static_cast<size_t>(len);
  }
  return true;
}

}  // namespace attnflow
