# schedules/looped_bfs.pp as a job of D identical replicas, each rank reducing each of its stages'
# gradients after its last backward (a test input of tests/test_prove_replicas.py).
# Looped BFS (Breadth-First Pipeline Parallelism, Lamy-Poirier, 2022), as
# torch.distributed.pipelining's ScheduleLoopedBFS orders it: each rank holds V chunks and runs
# every microbatch through its earlier chunk before the next one, then the backwards in reverse.
schedule looped_bfs_dp(P = 4, V = 2, M = 8, D = 2) {
  require P >= 1, V >= 1, M >= 1
  require D >= 1
  stages V * P
  replicas D
  place loop                      # stage s on rank s % P
  rank r {
    for v in 0 .. V { for m in 0 .. M { F(v * P + r, m) } }
    for v in reversed(0 .. V) { for m in reversed(0 .. M) { B(v * P + r, m) } }
    for v in 0 .. V { REDUCE_GRAD(v * P + r) }
  }
}
