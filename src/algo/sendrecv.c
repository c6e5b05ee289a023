/* SPDX-License-Identifier: Apache-2.0 */
/* Send and Recv: one message each. */
#include <string.h>

#include "algo.h"
#include "check.h"
#include "log.h"
#include "param.h"

/* Point to point: one message; the transport streams it through its slots. A send to self
 * is matched with the receive from self as a local copy by the enqueue layer. */
papcclResult_t papAlgoSendRecv(struct papEngine* e, struct papCall* op) {
  size_t bytes = op->count * papKernTypeSize(op->dtype);
  if (op->coll == PAP_COLL_SEND)
    PLAN_OK(papStepSend(e, op->root, op->sendbuff, bytes, -1, -1));
  else
    PLAN_OK(papStepRecv(e, op->root, op->recvbuff, bytes, -1, -1));
  return papcclSuccess;
}
