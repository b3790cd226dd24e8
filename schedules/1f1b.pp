# 1F1B (PipeDream-Flush, Narayanan et al., 2021): each rank warms up with forwards, then
# alternates one forward and one backward, then drains. Same bubble as GPipe, but rank r keeps
# at most min(P - r, M) microbatches of activations alive instead of M.
schedule 1f1b(P = 4, M = 8) {
  require P >= 1 else "1F1B needs at least one rank",
          M >= 1 else "1F1B needs at least one microbatch"
  stages P
  place loop                      # stage s on rank s
  rank r {
    let warm = min(P - 1 - r, M)  # forwards before the first backward
    for m in 0 .. warm     { F(r, m) }
    for m in 0 .. M - warm { F(r, m + warm); B(r, m) }
    for m in M - warm .. M { B(r, m) }
  }
}
