/* SPDX-License-Identifier: Apache-2.0 */
/* Test shim for the transport interface: the backends built, the shape of each one's ops
 * table (which tables it has, how many of their members are set, its caps), and
 * papTransportOpsCheck of its table as built or with one planted inconsistency. */
#ifndef PAPCCL_TESTS_SHIM_TRANSPORT_H_
#define PAPCCL_TESTS_SHIM_TRANSPORT_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The tables of a backend, by concern. */
enum {
  PAP_TEST_TBL_LIFE = 0, /* the ops table's own functions (and its name) */
  PAP_TEST_TBL_MSG,
  PAP_TEST_TBL_WAKE,
  PAP_TEST_TBL_LIVE,
  PAP_TEST_TBL_BOARD,
  PAP_TEST_TBL_HOME,
  PAP_TEST_TBL_LOCAL,
  PAP_TEST_TBL_COUNT
};

struct papTestTransportShape {
  const char* name;
  int present[PAP_TEST_TBL_COUNT]; /* the table is there (LIFE: always) */
  int set[PAP_TEST_TBL_COUNT]; /* its members that are not NULL (0 when absent) */
  int total[PAP_TEST_TBL_COUNT]; /* its members */
  int msgProbe, msgAbandon; /* msg's optional members, set */
  int idleProgress, remoteBoard, anySource;
  size_t handleBytes;
};

/* Planted inconsistencies, each applied to a copy of a backend's table. */
enum {
  PAP_TEST_PLANT_FLIP_ANY_SOURCE = 0, /* caps.anySource says the opposite of msg->probe */
  PAP_TEST_PLANT_NO_MSG, /* a required table missing */
  PAP_TEST_PLANT_WAKE_HOLE, /* a required table with a member missing */
  PAP_TEST_PLANT_LIVE_HOLE,
  PAP_TEST_PLANT_NO_FINALIZE, /* a lifecycle function missing */
  PAP_TEST_PLANT_OPTIONAL_HOLE, /* the backend's first optional table with a member missing */
  PAP_TEST_PLANT_BOARD_AND_HOME, /* the other board kind added (both a board and a home) */
  PAP_TEST_PLANT_HOME_LOCAL_BOARD, /* a home table, caps.remoteBoard 0 */
  PAP_TEST_PLANT_COUNT
};

int papTestTransportCount(void); /* backends built: shm, then ucx and ib where built */
void papTestTransportShapeOf(int i, struct papTestTransportShape* out);
/* papTransportOpsCheck of backend i's table: 0, or -1 with why filled. */
int papTestTransportCheck(int i, char* why, size_t cap);
/* The same with one planted inconsistency (PAP_TEST_PLANT_*). */
int papTestTransportCheckPlanted(int i, int plant, char* why, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* PAPCCL_TESTS_SHIM_TRANSPORT_H_ */
