#!/usr/bin/env bash
# `genesis recipe show --memory`: the per-rank table (parameters, gradients, optimizer state,
# activations of each checkpointing mode) and the same numbers with --json; --world-size with
# dist.zero shards the optimizer state; every shipped recipe is estimated (or names its missing
# model.init_from); a bad --world-size is a usage error.
set -u
source "$(dirname "$0")/common.sh" "$@"

# A GPT-2 of 4 blocks (C 64, 4 heads), vocabulary 96, on windows of 32 tokens, batches of 4 (the
# unit tests' recipe).
recipe="$src/tests/data/recipes/memory_gpt2.toml"
# wte, wpe, 4 blocks (norms, c_attn, c_proj, c_fc, c_proj with biases), ln_f.
params=$(((96 + 64) * 64 + 4 * (4 * 64 + 64 * 192 + 192 + 64 * 64 + 64 + 64 * 256 + 256 + 256 * 64 + 64) + 2 * 64))

"$genesis" recipe show --memory "$recipe" >"$work/table" 2>"$work/err"
check "recipe show --memory" 0 $?
for line in "memory per rank (gpt2 on cpu, 1 rank, dist.zero = 0)" "parameters" "gradients" "optimizer state" \
  "activations       none, batch 4 x 32 tokens, amp f32 (estimate)" "total" \
  "activations by training.activation_checkpointing" "(the recipe's)"; do
  grep -qF "$line" "$work/table" && ok "table: $line" || fail "table lacks '$line': $(cat "$work/table" "$work/err")"
done
for mode in none full selective; do
  grep -qE "^  $mode +[0-9.]+ (MiB|GiB) +total" "$work/table" && ok "table: mode $mode" || fail "table: no $mode line"
done

"$genesis" recipe show --memory "$recipe" --json >"$work/m.json" 2>"$work/err"
check "recipe show --memory --json" 0 $?
python3 - "$work/m.json" "$params" <<'EOF' && ok "--json: counts by hand, the total, full < selective < none" || fail "--json numbers"
import json, sys
m = json.load(open(sys.argv[1]))
n = int(sys.argv[2])
a = m["activations"]
assert m["estimate"] is True
assert m["parameters"]["trainable"] == n and m["parameters"]["frozen"] == 0, m["parameters"]
assert m["parameters"]["bytes"] == 4 * n and m["gradient_bytes"] == 4 * n, m
assert m["optimizer"] == {"slots": 2, "bytes": 8 * n, "offloaded": False}, m["optimizer"]
assert m["activation_checkpointing"] == "none" and m["activation_bytes"] == a["none"]["total"]
assert not m["gradients_overlap"]  # the CPU keeps its gradient buffers: they add up
assert m["total_bytes"] == 16 * n + m["activation_bytes"], m
assert a["full"]["total"] < a["selective"]["total"] < a["none"]["total"], a
for mode in a.values():
    assert mode["total"] == mode["saved"] + max(mode["head"], mode["backward"]), mode
EOF

"$genesis" recipe show --memory "$recipe" --json --world-size 4 --set dist.zero=1 >"$work/z.json" 2>"$work/err"
check "--world-size 4 with dist.zero = 1" 0 $?
python3 -c '
import json, sys
z, n = json.load(open(sys.argv[1])), int(sys.argv[2])
assert z["world_size"] == 4 and z["zero"] == 1
assert z["optimizer"]["bytes"] == (8 * n + 3) // 4 and z["gradient_bytes"] == 4 * n, z
' "$work/z.json" "$params" && ok "ZeRO-1 over 4 ranks: a quarter of the optimizer state" || fail "ZeRO-1 numbers"

"$genesis" recipe show --memory "$recipe" --set training.activation_checkpointing=full >"$work/full" 2>&1
grep -qE "^  full .*\(the recipe's\)" "$work/full" && grep -qF "activations       full," "$work/full" \
  && ok "the recipe's mode is marked" || fail "full: $(cat "$work/full")"
"$genesis" recipe show "$recipe" | grep -qxF "[run]" && ok "recipe show without --memory prints the recipe" \
  || fail "recipe show without --memory"
"$genesis" recipe show --memory "$recipe" --world-size 0 >/dev/null 2>&1
check "--world-size 0 is a usage error" 2 $?
"$genesis" recipe show --memory "$recipe" --set dist.offload_optimizer=true >/dev/null 2>"$work/err"
check "dist.offload_optimizer on run.device = \"cpu\" is a recipe error" 2 $?
grep -qF "dist.offload_optimizer moves the optimizer state from a GPU to the host" "$work/err" \
  && [ "$(wc -l <"$work/err")" -eq 1 ] && ok "one line saying why" || fail "offload on cpu: $(cat "$work/err")"

# Every shipped recipe: an estimate, or (a model directory not here) one line naming it.
for recipe in "$src"/recipes/*.toml; do
  "$genesis" recipe show --memory "$recipe" >"$work/out" 2>"$work/err"
  rc=$?
  if [ $rc -eq 0 ] && grep -q "^  total" "$work/out"; then
    ok "memory of $(basename "$recipe")"
  elif [ $rc -eq 2 ] && grep -q "model.init_from: .* does not exist" "$work/err"; then
    ok "memory of $(basename "$recipe"): names its missing model.init_from"
  else
    fail "memory of $(basename "$recipe"): exit $rc, $(cat "$work/err")"
  fi
done

finish "recipe memory"
