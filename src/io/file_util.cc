// file_util.cc — whole-file reads and atomic writes (see file_util.h).
//
// Invariant: WriteFileAtomic either renames a fully written, flushed and
// fsync'ed temporary file over the target, or removes the temporary file and
// leaves the target as it was. No exception escapes.
#include "attnflow/file_util.h"
#include "core/utf8.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <mutex>
#include <new>
#include <utility>

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

// ---- temporary paths removed on SIGINT / SIGTERM / SIGHUP / SIGXFSZ / SIGBUS --
// A fixed table the signal handlers read without locks (state 2 = live).
// The handler unlinks every live temporary file (rmdir for directories,
// after unlinking their entries), restores the previous disposition and
// re-raises, so the process still ends by the signal. The SIGBUS guard of
// mapped files (below) removes them too before it ends the process.
constexpr int kTempSlots = 32;
constexpr size_t kTempPath = 4096;
struct TempSlot {
  std::atomic<int> state{0};
  bool is_dir = false;
  char path[kTempPath];
};
TempSlot g_temps[kTempSlots];
// SIGXFSZ: a write past `ulimit -f` (the CLI ignores it, so its writes fail
// with EFBIG instead).
constexpr int kCleanupSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGXFSZ};
constexpr int kNumCleanupSignals = 4;
struct sigaction g_prev_cleanup[kNumCleanupSignals];
std::once_flag g_cleanup_once;

void RemoveTempDirEntries(const char* dir);

// Async-signal-safe: removes every live temporary (files and directories).
// Called by the handlers of every signal that ends the process while an
// output may be half written (CleanupHandler, SigbusHandler).
void RemoveLiveTemps() {
  for (TempSlot& t : g_temps) {
    if (t.state.load(std::memory_order_acquire) != 2) continue;
    if (t.is_dir) {
      RemoveTempDirEntries(t.path);
      ::rmdir(t.path);
    } else {
      ::unlink(t.path);
    }
  }
}

void CleanupHandler(int sig) {
  RemoveLiveTemps();
  for (int i = 0; i < kNumCleanupSignals; ++i) {
    if (kCleanupSignals[i] != sig) continue;
    const struct sigaction& prev = g_prev_cleanup[i];
    if (prev.sa_handler == SIG_IGN) return;
    if (!(prev.sa_flags & SA_SIGINFO) && prev.sa_handler != SIG_DFL) {
      prev.sa_handler(sig);  // someone else's handler (e.g. chat's Ctrl-C)
      return;
    }
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

int RegisterTemp(const std::string& path, bool is_dir) {
  std::call_once(g_cleanup_once, [] {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_handler = CleanupHandler;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < kNumCleanupSignals; ++i) {
      struct sigaction cur;
      if (::sigaction(kCleanupSignals[i], nullptr, &cur) != 0) continue;
      // Leave an ignored signal ignored (nohup) and a SA_SIGINFO handler alone.
      if (cur.sa_handler == SIG_IGN || (cur.sa_flags & SA_SIGINFO)) {
        g_prev_cleanup[i] = cur;
        continue;
      }
      ::sigaction(kCleanupSignals[i], &sa, &g_prev_cleanup[i]);
    }
  });
  if (path.size() >= kTempPath) return -1;
  for (int i = 0; i < kTempSlots; ++i) {
    int expected = 0;
    if (!g_temps[i].state.compare_exchange_strong(expected, 1)) continue;
    std::memcpy(g_temps[i].path, path.c_str(), path.size() + 1);
    g_temps[i].is_dir = is_dir;
    g_temps[i].state.store(2, std::memory_order_release);
    return i;
  }
  return -1;  // table full: this temporary is only removed on the error paths
}

void UnregisterTemp(int slot) {
  if (slot >= 0) g_temps[slot].state.store(0, std::memory_order_release);
}

// Removes the temporary file; used on every failure path.
void RemoveQuietly(const std::string& tmp) { ::unlink(tmp.c_str()); }

// Async-signal-safe: unlinks the plain entries of `dir` with getdents64.
void RemoveTempDirEntries(const char* dir) {
  const int fd = ::open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  alignas(8) static char buf[8192];
  for (;;) {
    const long n = ::syscall(SYS_getdents64, fd, buf, sizeof(buf));
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      const char* rec = buf + off;
      unsigned short reclen;
      std::memcpy(&reclen, rec + 16, sizeof(reclen));
      const char* name = rec + 19;
      if (!(name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0)))) {
        ::unlinkat(fd, name, 0);
      }
      off += reclen;
    }
  }
  ::close(fd);
}

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
    // The rename below would bypass the file's own mode: refuse a file its
    // owner marked read-only (even for root) and one this user may not write.
    if ((target_st.st_mode & S_IWUSR) == 0 || ::access(path.c_str(), W_OK) != 0) {
      char mode[8];
      std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(target_st.st_mode & 07777));
      return IoError("cannot write '" + path + "': the file is read-only (mode " + mode +
                     "); refusing to replace it");
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
  // Removed by the signal handlers if SIGINT/SIGTERM/SIGHUP/SIGXFSZ or a
  // guarded mapping's SIGBUS comes before the rename; unregistered on every
  // return below.
  struct TempGuard {
    int slot;
    ~TempGuard() { UnregisterTemp(slot); }
  } temp_guard{RegisterTemp(tmp, false)};
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

namespace {

// Removes the plain files of `dir` and `dir` itself (best effort).
void RemoveDirQuietly(const std::string& dir) {
  RemoveTempDirEntries(dir.c_str());
  ::rmdir(dir.c_str());
}

}  // namespace

Status WriteDirectoryAtomic(const std::string& dir_in, const std::string& ext,
                            const std::function<Status(const std::string& tmp_dir)>& fill) {
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (dir.empty()) return IoError("cannot write directory '': empty path");
  std::string parent, base;
  SplitPath(dir, &parent, &base);
  if (base.empty() || base == "." || base == "..") {
    return IoError("cannot write directory '" + dir_in + "': name it by a new or export directory, not '" +
                   base + "'");
  }
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  if (ec) return IoError("cannot create directory '" + parent + "': " + ec.message());
  bool exists = false, empty = true;
  std::vector<std::string> keep;  // entries of another kind, carried over
  struct stat st;
  if (::lstat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) {
      return IoError("cannot write directory '" + dir + "': it exists and is not a directory");
    }
    exists = true;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      empty = false;
      const std::string name = e.path().filename().string();
      const bool file = e.is_symlink(ec) || e.is_regular_file(ec);
      if (!file) {
        return IoError("cannot write directory '" + dir + "': it holds '" + name +
                       "', which is not a file; refusing to replace it (choose a new or empty directory)");
      }
      const bool same_kind = name.size() > ext.size() &&
                             name.compare(name.size() - ext.size(), ext.size(), ext) == 0;
      if (!same_kind) keep.push_back(name);
    }
    if (ec) return IoError("cannot list directory '" + dir + "': " + ec.message());
  }
  const std::string stem = base.size() > 100 ? base.substr(0, 100) : base;
  std::string tmp;
  for (int attempt = 0; attempt < 100; ++attempt) {
    tmp = (parent == "/" ? std::string("/") : parent + "/") + "." + stem + ".tmp-" +
          std::to_string(::getpid()) + "-" + std::to_string(g_tmp_counter.fetch_add(1));
    if (::mkdir(tmp.c_str(), 0777) == 0) break;
    if (errno != EEXIST) return WriteError(dir, "cannot create a directory in '" + parent + "'", errno);
    tmp.clear();
  }
  if (tmp.empty()) return IoError("cannot write directory '" + dir + "': no free temporary name");
  struct TempGuard {
    int slot;
    ~TempGuard() { UnregisterTemp(slot); }
  } guard{RegisterTemp(tmp, true)};
  Status s;
  try {
    s = fill(tmp);
  } catch (const std::bad_alloc&) {
    s = ResourceExhausted("cannot write directory '" + dir + "': out of memory");
  }
  if (!s.ok()) {
    RemoveDirQuietly(tmp);
    return s;
  }
  if (!exists || empty) {
    if (::rename(tmp.c_str(), dir.c_str()) != 0) {
      const int err = errno;
      RemoveDirQuietly(tmp);
      return WriteError(dir, "renaming '" + tmp + "' into place", err);
    }
  } else {
    // Files of other kinds (another export, the user's notes) are carried
    // over as hard links; files of this kind are the old export and go.
    for (const std::string& name : keep) {
      if (::linkat(AT_FDCWD, (dir + "/" + name).c_str(), AT_FDCWD, (tmp + "/" + name).c_str(), 0) != 0 &&
          errno != EEXIST) {
        const int err = errno;
        RemoveDirQuietly(tmp);
        return WriteError(dir, "keeping '" + name + "' (hard link into '" + tmp + "')", err);
      }
    }
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) != 0) {
      const int err = errno;
      RemoveDirQuietly(tmp);
      return WriteError(dir, "exchanging '" + tmp + "' with it", err);
    }
    RemoveDirQuietly(tmp);  // now the old export
  }
  const int dfd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
  return Status::Ok();
}

Status CheckOutputIsNotInput(const std::string& op, const std::string& input,
                             const std::string& output) {
  struct stat in_st, out_st;
  if (::stat(input.c_str(), &in_st) != 0 || ::stat(output.c_str(), &out_st) != 0) {
    return Status::Ok();
  }
  if (in_st.st_dev != out_st.st_dev || in_st.st_ino != out_st.st_ino) return Status::Ok();
  return InvalidArgument(op + ": the output '" + output + "' is the input file '" + input +
                         "' (same device and inode); write to another path");
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

// ---- the SIGBUS guard of mapped files ---------------------------------------
//
// A fixed table, written by Map/Unmap and read by the signal handler without
// locks: a slot is claimed by a CAS on `state` (0 free, 1 being filled or
// emptied, 2 live); the handler only trusts slots in state 2. Paths longer
// than the slot are cut (the message says "...").
namespace {

constexpr int kGuardSlots = 64;
constexpr size_t kGuardPath = 1024;
struct GuardSlot {
  std::atomic<int> state{0};
  std::atomic<uintptr_t> base{0};
  std::atomic<size_t> size{0};
  char path[kGuardPath];
};
GuardSlot g_guard[kGuardSlots];
struct sigaction g_prev_sigbus;
std::once_flag g_sigbus_once;

void WriteAll(const char* s, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(2, s, n);
    if (w <= 0) {
      if (w < 0 && errno == EINTR) continue;
      return;
    }
    s += w;
    n -= static_cast<size_t>(w);
  }
}
void WriteStr(const char* s) { WriteAll(s, std::strlen(s)); }
void WriteDec(uint64_t v) {
  char buf[24];
  int i = sizeof(buf);
  do {
    buf[--i] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  WriteAll(buf + i, sizeof(buf) - i);
}

void SigbusHandler(int sig, siginfo_t* info, void* ctx) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (GuardSlot& g : g_guard) {
    if (g.state.load(std::memory_order_acquire) != 2) continue;
    const uintptr_t base = g.base.load(std::memory_order_relaxed);
    const size_t size = g.size.load(std::memory_order_relaxed);
    if (addr < base || addr - base >= size) continue;
    WriteStr("attnflow: error: '");
    WriteStr(g.path);
    WriteStr("': the file was truncated while in use (read fault at byte ");
    WriteDec(addr - base);
    WriteStr(" of ");
    WriteDec(size);
    WriteStr(" mapped); a model file must not be rewritten in place while attnflow "
             "uses it (replace it by rename instead)\n");
    RemoveLiveTemps();  // an output being written is not left behind
    ::_exit(kMappedFileChangedExit);
  }
  // Not ours: hand over to whoever was there before.
  if (g_prev_sigbus.sa_flags & SA_SIGINFO) {
    if (g_prev_sigbus.sa_sigaction != nullptr) {
      g_prev_sigbus.sa_sigaction(sig, info, ctx);
      return;
    }
  } else if (g_prev_sigbus.sa_handler != SIG_DFL && g_prev_sigbus.sa_handler != SIG_IGN) {
    g_prev_sigbus.sa_handler(sig);
    return;
  }
  ::signal(SIGBUS, SIG_DFL);  // the fault repeats on return and kills as before
}

void InstallSigbusHandler() {
  std::call_once(g_sigbus_once, [] {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = SigbusHandler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_prev_sigbus);
  });
}

int GuardRegister(const void* base, size_t size, const std::string& path) {
  InstallSigbusHandler();
  for (int i = 0; i < kGuardSlots; ++i) {
    int expected = 0;
    if (!g_guard[i].state.compare_exchange_strong(expected, 1)) continue;
    const size_t n = std::min(path.size(), kGuardPath - 4);
    std::memcpy(g_guard[i].path, path.data(), n);
    std::strcpy(g_guard[i].path + n, n < path.size() ? "..." : "");
    g_guard[i].base.store(reinterpret_cast<uintptr_t>(base), std::memory_order_relaxed);
    g_guard[i].size.store(size, std::memory_order_relaxed);
    g_guard[i].state.store(2, std::memory_order_release);
    return i;
  }
  return -1;  // table full: this mapping is unguarded (64 files open at once)
}

void GuardRelease(int slot) {
  if (slot < 0) return;
  g_guard[slot].state.store(1, std::memory_order_release);
  g_guard[slot].base.store(0, std::memory_order_relaxed);
  g_guard[slot].state.store(0, std::memory_order_release);
}

}  // namespace

FileBytes::FileBytes(FileBytes&& o) noexcept { *this = std::move(o); }

FileBytes& FileBytes::operator=(FileBytes&& o) noexcept {
  if (this != &o) {
    Unmap();
    base_ = std::exchange(o.base_, nullptr);
    map_size_ = std::exchange(o.map_size_, 0);
    guard_slot_ = std::exchange(o.guard_slot_, -1);
    owned_ = std::move(o.owned_);  // the buffer address is kept
    o.owned_.clear();
  }
  return *this;
}

FileBytes::~FileBytes() { Unmap(); }

void FileBytes::Unmap() {
  GuardRelease(guard_slot_);
  guard_slot_ = -1;
  if (base_ != nullptr) ::munmap(base_, map_size_);
  base_ = nullptr;
  map_size_ = 0;
}

const uint8_t* FileBytes::data() const {
  return base_ != nullptr ? static_cast<const uint8_t*>(base_)
                          : (owned_.empty() ? nullptr : owned_.data());
}

size_t FileBytes::size() const { return base_ != nullptr ? map_size_ : owned_.size(); }

FileBytes FileBytes::Own(std::vector<uint8_t> bytes) {
  FileBytes b;
  b.owned_ = std::move(bytes);
  return b;
}

Result<FileBytes> FileBytes::Map(const std::string& path, const std::string& prefix,
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
  FileBytes m;
  if (st.st_size > 0) {
    const size_t n = static_cast<size_t>(st.st_size);
    void* p = ::mmap(nullptr, n, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return IoError(prefix + "cannot mmap " + std::to_string(n) + " bytes: " + ErrnoString(err));
    }
    m.base_ = p;
    m.map_size_ = n;
    m.guard_slot_ = GuardRegister(p, n, path);
  }
  ::close(fd);  // the mapping stays valid
  return m;
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
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
