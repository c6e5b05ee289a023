// SPDX-License-Identifier: Apache-2.0
// WARN capture for every GoogleTest program: the library's WARNs are recorded while a test
// runs; a WARN the test did not expect fails it.
#ifndef PAPCCL_TESTS_COMMON_WARN_CAPTURE_H_
#define PAPCCL_TESTS_COMMON_WARN_CAPTURE_H_

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace papt {

// While the hook is installed (WarnTest below), every WARN the library logs is recorded. A
// WARN inside an ExpectWarn scope whose patterns it matches (any WARN when the list is empty)
// is expected; any other WARN is unexpected (WarnTest fails the test at TearDown; the
// multi-rank harness, in a forked child, at its exit). Scopes of the thread that logs the
// WARN are tried first, innermost first, then those of other threads.
class ExpectWarn {
 public:
  explicit ExpectWarn(std::vector<std::string> patterns = {});
  ~ExpectWarn();
  ExpectWarn(const ExpectWarn&) = delete;
  ExpectWarn& operator=(const ExpectWarn&) = delete;
  int Count() const;
  // WARNs of this scope that contain substring.
  int Count(const std::string& substring) const;
  bool Saw(const std::string& substring) const;
  // Waits until Count(substring) >= n; false when timeoutS passed first.
  bool WaitFor(const std::string& substring, int n, double timeoutS) const;
  std::vector<std::string> Messages() const;
  // Internal: does msg belong to this scope?
  bool Matches(const std::string& msg) const;
  void Record(const std::string& msg);
  std::thread::id Thread() const {
    return thread_;
  }

 private:
  std::vector<std::string> patterns_;
  std::thread::id thread_;
  std::vector<std::string> seen_;
};

// Installs the recording hook and clears the unexpected list (tests that do not use the
// fixture below may call these).
void InstallWarnHook();
void RemoveWarnHook();
// Unexpected WARNs since the last call (and clears the list).
std::vector<std::string> TakeUnexpectedWarns();

// Fixture that records WARNs while a test runs and fails it on any it did not expect.
class WarnTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  // Takes the WARNs no ExpectWarn scope took so far: they are then expected.
  std::vector<std::string> Take() {
    return TakeUnexpectedWarns();
  }
};

}  // namespace papt

#endif  // PAPCCL_TESTS_COMMON_WARN_CAPTURE_H_
