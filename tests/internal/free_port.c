/* SPDX-License-Identifier: Apache-2.0 */
#include "tests/internal/free_port.h"

#include "src/launcher/free_port.h"

int papTestFreeFixedPort(void) {
  return papFreeFixedPort();
}
