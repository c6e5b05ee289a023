// SPDX-License-Identifier: Apache-2.0
// WARN capture for every GoogleTest program (see warn_capture.h).
#include "common/warn_capture.h"

#include <algorithm>
#include <chrono>
#include <mutex>

#include "internal/shim_comm.h"

namespace papt {

namespace {
std::mutex gWarnMu;
std::vector<ExpectWarn*> gScopes;
std::vector<std::string> gUnexpected;

// Runs under the library's log lock (it must not call back into the library).
void WarnHook(const char* msg, void*) {
  std::lock_guard<std::mutex> lock(gWarnMu);
  std::string m(msg ? msg : "");
  // A scope of the warning thread first (ranks as threads warn concurrently), innermost
  // first; then any scope (WARNs of the library's own threads).
  const std::thread::id self = std::this_thread::get_id();
  for (int pass = 0; pass < 2; pass++) {
    for (auto it = gScopes.rbegin(); it != gScopes.rend(); ++it) {
      if (pass == 0 && (*it)->Thread() != self) continue;
      if ((*it)->Matches(m)) {
        (*it)->Record(m);
        return;
      }
    }
  }
  gUnexpected.push_back(m);
}
}  // namespace

ExpectWarn::ExpectWarn(std::vector<std::string> patterns)
    : patterns_(std::move(patterns)), thread_(std::this_thread::get_id()) {
  std::lock_guard<std::mutex> lock(gWarnMu);
  gScopes.push_back(this);
}

ExpectWarn::~ExpectWarn() {
  std::lock_guard<std::mutex> lock(gWarnMu);
  gScopes.erase(std::remove(gScopes.begin(), gScopes.end(), this), gScopes.end());
}

bool ExpectWarn::Matches(const std::string& msg) const {
  if (patterns_.empty()) return true;
  for (const auto& p : patterns_)
    if (msg.find(p) != std::string::npos) return true;
  return false;
}

void ExpectWarn::Record(const std::string& msg) {
  seen_.push_back(msg);
}

int ExpectWarn::Count() const {
  std::lock_guard<std::mutex> lock(gWarnMu);
  return (int)seen_.size();
}

int ExpectWarn::Count(const std::string& substring) const {
  std::lock_guard<std::mutex> lock(gWarnMu);
  int n = 0;
  for (const auto& m : seen_)
    n += m.find(substring) != std::string::npos;
  return n;
}

bool ExpectWarn::Saw(const std::string& substring) const {
  return Count(substring) > 0;
}

bool ExpectWarn::WaitFor(const std::string& substring, int n, double timeoutS) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeoutS);
  while (Count(substring) < n) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

std::vector<std::string> ExpectWarn::Messages() const {
  std::lock_guard<std::mutex> lock(gWarnMu);
  return seen_;
}

void InstallWarnHook() {
  {
    std::lock_guard<std::mutex> lock(gWarnMu);
    gUnexpected.clear();
  }
  papTestCommSetWarnHook(&WarnHook, nullptr);
}

void RemoveWarnHook() {
  papTestCommSetWarnHook(nullptr, nullptr);
}

std::vector<std::string> TakeUnexpectedWarns() {
  std::lock_guard<std::mutex> lock(gWarnMu);
  std::vector<std::string> out;
  out.swap(gUnexpected);
  return out;
}

void WarnTest::SetUp() {
  InstallWarnHook();
}

void WarnTest::TearDown() {
  RemoveWarnHook();
  for (const auto& m : TakeUnexpectedWarns())
    ADD_FAILURE() << "unexpected WARN: " << m;
}

}  // namespace papt
