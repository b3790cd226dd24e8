# Interleaved 1F1B (Megatron-LM, Narayanan et al., 2021), as torch.distributed.pipelining's
# ScheduleInterleaved1F1B orders it: each rank holds V chunks (stages r, r+P, r+2P, ...), runs
# microbatches in rounds of `per_round`, forwards depth-first through its chunks, and alternates
# one forward and one backward in steady state. The bubble shrinks by a factor V.
schedule interleaved_1f1b(P = 4, V = 2, M = 8) {
  require P >= 1, V >= 1, M >= 1
  let rounds = max(1, M // P)
  let per_round = M // rounds
  require M % rounds == 0 else "interleaved 1F1B needs M to be a multiple of the number of rounds max(1, M // P)"
  stages V * P
  place loop                      # stage s on rank s % P
  rank r {
    let total = V * M             # forwards (and backwards) on this rank
    let warm = min((V - 1) * per_round + 2 * (P - 1 - r), total)
    for op in 0 .. total + warm {
      if op < total {             # forward number op: chunk (op // per_round) % V
        F(((op // per_round) % V) * P + r, (op // (per_round * V)) * per_round + op % per_round)
      }
      if op >= warm {             # backward number op - warm: chunks in reverse order
        let k = op - warm
        B((V - 1 - (k // per_round) % V) * P + r, (k // (per_round * V)) * per_round + k % per_round)
      }
    }
  }
}
