# Rank 0 overlaps F(0, 1) with B(0, 0). In sequence (F(0, 1) first) this would run, but an overlap
# step waits for both inputs before it starts: B(0, 0) needs rank 1's B(1, 0), which comes after
# F(1, 1), which needs F(0, 1), the step itself. A deadlock only a one-step reading of overlap sees.
schedule overlap_cycle(P = 2, M = 2) {
  require P == 2, M == 2
  stages 2
  place loop
  rank 0 { F(0, 0); overlap(F(0, 1), B(0, 0)); B(0, 1) }
  rank 1 { F(1, 0); F(1, 1); B(1, 0); B(1, 1) }
}
