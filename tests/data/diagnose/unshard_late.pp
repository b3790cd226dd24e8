# Two replicas of a two-stage pipeline, FSDP-style: replica 0's rank 0 and replica 1's rank 1
# gather their stage's parameters first, the others only after their backwards.
schedule unshard_late(P = 2, M = 2) {
  stages P
  place loop
  replicas 2
  rank r, replica d {
    if r == d { UNSHARD(r) }
    for m in 0 .. M { F(r, m) }
    for m in 0 .. M { B(r, m) }
    if r != d { UNSHARD(r) }
    REDUCE_GRAD(r)
  }
}
