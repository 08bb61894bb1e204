// core/thread_start.h — how ThreadPool starts a worker thread, replaceable
// by tests to simulate a system that refuses threads (EAGAIN from a process
// limit, ENOMEM under an address-space limit) without touching the limits
// of the test process (which ASan and TSan would not survive).
//
// Invariant: a starter either returns a joinable thread running `fn` or
// throws (std::system_error, std::bad_alloc) and runs nothing, exactly like
// the std::thread constructor it stands for.
#pragma once

#include <functional>
#include <thread>

namespace attnflow::internal {

using ThreadStarter = std::thread (*)(std::function<void()> fn);

// nullptr restores the default (std::thread). Not thread-safe: set it
// before creating the pools under test.
void SetThreadStarterForTesting(ThreadStarter starter);

}  // namespace attnflow::internal
