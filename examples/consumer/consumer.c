/* A minimal Chorus program: every rank contributes rank+1, every rank checks the sum.
 * Built by examples/consumer/CMakeLists.txt (find_package) or with pkg-config:
 *   cc consumer.c $(pkg-config --cflags --libs chorus) -o consumer
 * Run: chorusrun -np 2 ./consumer (or under mpirun, srun, torchrun variables). */
#include <chorus/chorus.h>
#include <stdio.h>

int main(void) {
  chorusComm_t comm;
  if (chorusCommInitFromEnv(&comm) != chorusSuccess) {
    fprintf(stderr, "init failed: %s\n", chorusGetLastError(NULL));
    return 1;
  }
  int rank = 0, n = 0, version = 0;
  chorusCommUserRank(comm, &rank);
  chorusCommCount(comm, &n);
  chorusGetVersion(&version);
  float x[4];
  for (int i = 0; i < 4; ++i) x[i] = (float)(rank + 1);
  if (chorusAllReduce(x, x, 4, chorusFloat32, chorusSum, comm, NULL) != chorusSuccess) {
    fprintf(stderr, "rank %d: %s\n", rank, chorusGetLastError(comm));
    return 1;
  }
  const float want = (float)(n * (n + 1) / 2);
  int ok = 1;
  for (int i = 0; i < 4; ++i) ok = ok && x[i] == want;
  printf("rank %d of %d: sum %g %s (chorus %d)\n", rank, n, x[0], ok ? "OK" : "WRONG", version);
  chorusCommDestroy(comm);
  return ok ? 0 : 1;
}
