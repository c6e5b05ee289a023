// SPDX-License-Identifier: Apache-2.0
// Scoped environment changes for the tests: one PAPCCL_* variable set or unset for a scope.
#ifndef PAPCCL_TESTS_COMMON_SCOPED_ENV_H_
#define PAPCCL_TESTS_COMMON_SCOPED_ENV_H_

#include <string>

namespace papt {

// Sets (value != nullptr) or unsets an environment variable and forgets the library's cached
// parameters; restores both at scope end. Use only while no communicator thread reads params.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ScopedEnv(const char* name, const std::string& value) : ScopedEnv(name, value.c_str()) {}
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  bool had_;
  std::string old_;
};

}  // namespace papt

#endif  // PAPCCL_TESTS_COMMON_SCOPED_ENV_H_
