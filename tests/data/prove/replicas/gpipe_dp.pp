# GPipe (schedules/gpipe.pp) as a data-parallel job of D identical replicas, FSDP-style: each rank
# gathers its stage's parameters first, reduces its gradients after its last backward and reshards.
schedule gpipe_dp(P = 4, M = 8, D = 2) {
  require P >= 1, M >= 1, D >= 1
  stages P
  replicas D
  place loop
  rank r, replica d {
    UNSHARD(r)
    for m in 0 .. M { F(r, m) }
    for m in 0 .. M { B(r, m) }
    REDUCE_GRAD(r)
    RESHARD(r)
  }
}
