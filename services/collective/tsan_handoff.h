// Tells ThreadSanitizer about an ordering between threads that it cannot see: gRPC hands work from
// one thread to another (StartWrite here, OnWriteDone on a gRPC thread; a slice released by a gRPC
// thread) inside libgrpc, which is not instrumented. Marking the hand-off on the object passed
// along, instead of suppressing reports by function name, keeps the checks on our own code.
// Both calls compile to nothing outside a ThreadSanitizer build.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define STRATA_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define STRATA_TSAN 1
#endif
#endif

#ifdef STRATA_TSAN
#include <sanitizer/tsan_interface.h>
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
#endif

namespace strata {

// Everything this thread did before is visible to a thread that later calls TsanAcquire(object).
inline void TsanRelease(const void* object) {
#ifdef STRATA_TSAN
  __tsan_release(const_cast<void*>(object));
#else
  (void)object;
#endif
}

// Pairs with the TsanRelease(object) calls that gRPC's hand-off ordered before this point.
inline void TsanAcquire(const void* object) {
#ifdef STRATA_TSAN
  __tsan_acquire(const_cast<void*>(object));
#else
  (void)object;
#endif
}

// A reactor callback, from entry to return: acquires at entry and releases at return, so that
// the callbacks gRPC starts after this one returned (OnDone always is) see what it did.
class TsanCallbackScope {
 public:
  explicit TsanCallbackScope(const void* reactor) : reactor_(reactor) { TsanAcquire(reactor_); }
  ~TsanCallbackScope() { TsanRelease(reactor_); }
  TsanCallbackScope(const TsanCallbackScope&) = delete;
  TsanCallbackScope& operator=(const TsanCallbackScope&) = delete;

 private:
  const void* reactor_;
};

// While it lives, this thread's reads are not checked: for a call into gRPC that reads the
// reactor after the hand-off it performs (RemoveHold), which gRPC orders before OnDone.
class TsanIgnoreReads {
 public:
#ifdef STRATA_TSAN
  TsanIgnoreReads() { AnnotateIgnoreReadsBegin(__FILE__, __LINE__); }
  ~TsanIgnoreReads() { AnnotateIgnoreReadsEnd(__FILE__, __LINE__); }
#else
  TsanIgnoreReads() {}   // user-provided, so that a guard variable is not "unused"
  ~TsanIgnoreReads() {}  // NOLINT(modernize-use-equals-default)
#endif
  TsanIgnoreReads(const TsanIgnoreReads&) = delete;
  TsanIgnoreReads& operator=(const TsanIgnoreReads&) = delete;
};

}  // namespace strata
