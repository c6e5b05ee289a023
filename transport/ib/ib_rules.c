/* SPDX-License-Identifier: Apache-2.0 */
/* The ib queue-pair state machine and credit rule. */
#include "ib/ib_rules.h"

/* ---- Queue-pair state machine ---------------------------------------------------------- */

int papIbNextState(int state, int event) {
  if (state < 0 || state >= PAP_IB_QP_NSTATES || event < 0 || event >= PAP_IB_EV_NEVENTS) return -1;
  if (event == PAP_IB_EV_FAIL) return PAP_IB_QP_ERROR;
  if (event == PAP_IB_EV_TO_RESET) return PAP_IB_QP_RESET;
  static const int forward[PAP_IB_QP_NSTATES] = {
      [PAP_IB_QP_RESET] = PAP_IB_EV_TO_INIT,
      [PAP_IB_QP_INIT] = PAP_IB_EV_TO_RTR,
      [PAP_IB_QP_RTR] = PAP_IB_EV_TO_RTS,
      [PAP_IB_QP_RTS] = -1,
      [PAP_IB_QP_ERROR] = -1,
  };
  return forward[state] == event ? state + 1 : -1;
}

const char* papIbStateName(int state) {
  static const char* const names[PAP_IB_QP_NSTATES] = {"RESET", "INIT", "RTR", "RTS", "ERROR"};
  return state >= 0 && state < PAP_IB_QP_NSTATES ? names[state] : "?";
}

/* ---- Credits ---------------------------------------------------------------------------- */

int papIbShouldReturnCredits(unsigned pending, unsigned unreturned, unsigned nbufs) {
  if (pending == 0) return 0;
  unsigned batch = nbufs / 2 ? nbufs / 2 : 1;
  return pending >= batch || unreturned >= nbufs;
}
