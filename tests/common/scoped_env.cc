// SPDX-License-Identifier: Apache-2.0
// Scoped environment changes for the tests (see scoped_env.h).
#include "common/scoped_env.h"

#include <cstdlib>

#include "internal/shim_comm.h"

namespace papt {

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
  const char* old = getenv(name);
  had_ = old != nullptr;
  if (had_) old_ = old;
  if (value)
    setenv(name, value, 1);
  else
    unsetenv(name);
  papTestCommParamReset();
}

ScopedEnv::~ScopedEnv() {
  if (had_)
    setenv(name_.c_str(), old_.c_str(), 1);
  else
    unsetenv(name_.c_str());
  papTestCommParamReset();
}

}  // namespace papt
