#!/usr/bin/env bash
# genesis bench on the CPU: ceilings, a tiny ops suite (every case checked and timed), the
# JSON schema, compare, alloc, and bad input (exit 2 naming the case and file:line).
#   tests/cli/test_bench.sh PATH_TO_GENESIS SOURCE_DIR
set -u
source "$(dirname "$0")/common.sh" "$@"
suite="$src/tests/data/bench_suite.toml"
fast=(--device cpu --reps 3 --budget-ms 5 --flush-mib 1)
command -v python3 >/dev/null || fail "python3 is not installed (scripts/setup.sh installs it); it checks the JSON reports"

"$genesis" bench ceilings --device cpu --gemm-size 48 --json "$work/ceilings.json" > "$work/ceilings.txt"
check "bench ceilings" 0 $?
grep -q "GB/s" "$work/ceilings.txt" || fail "bench ceilings prints no bandwidth"

"$genesis" bench ops "${fast[@]}" --suite "$suite" --ceilings "$work/ceilings.json" --json "$work/a.json" > "$work/a.txt"
check "bench ops on the tiny suite" 0 $?
grep -q "ok (err" "$work/a.txt" || fail "bench ops prints no checked rows"
tail -1 "$work/a.txt" | grep -q " 0 FAIL" || fail "bench ops summary line: $(tail -1 "$work/a.txt")"

# Each instruction set of the CPU loops (kernels/cpu/isa.h) computes what the reference does;
# `genesis info` names the one in use.
for isa in baseline avx2 avx512; do
  GENESIS_CPU_ISA=$isa "$genesis" bench ops "${fast[@]}" --suite "$suite" --ceilings "$work/ceilings.json" \
    > "$work/isa_$isa.txt"
  check "bench ops with GENESIS_CPU_ISA=$isa" 0 $?
  tail -1 "$work/isa_$isa.txt" | grep -q " 0 FAIL" || fail "GENESIS_CPU_ISA=$isa: $(tail -1 "$work/isa_$isa.txt")"
done
GENESIS_CPU_ISA=baseline "$genesis" info --json | python3 -c '
import json, sys
isa = json.load(sys.stdin)["cpu_isa"]
sys.exit(0 if isa["isa"] == "baseline" and isa["source"] == "GENESIS_CPU_ISA" else 1)' \
  && ok "info reports the CPU instruction set GENESIS_CPU_ISA asks for" || fail "info cpu_isa"

"$genesis" bench ops "${fast[@]}" --suite "$suite" --ceilings "$work/ceilings.json" --filter 'softmax|layer_norm' \
  --dtype f32 --json "$work/b.json" > "$work/b.txt"
check "bench ops --filter --dtype" 0 $?
[ "$(grep -c "ok (err" "$work/b.txt")" = 2 ] || fail "--filter 'softmax|layer_norm' --dtype f32 should run 2 cases"
# -q: nothing on stderr; on a terminal, a progress bar between the rows otherwise.
"$genesis" bench ops "${fast[@]}" -q --suite "$suite" --ceilings "$work/ceilings.json" --filter softmax \
  > /dev/null 2> "$work/q.err"
check "bench ops -q" 0 $?
[ -s "$work/q.err" ] && fail "bench ops -q wrote to stderr: $(head -2 "$work/q.err")"
if command -v script >/dev/null; then
  script -qc "'$genesis' bench ops --device cpu --reps 3 --budget-ms 5 --flush-mib 1 --suite '$suite' \
    --ceilings '$work/ceilings.json' --filter softmax" /dev/null | tr '\r' '\n' > "$work/tty.out"
  grep -q "bench ops 0/" "$work/tty.out" && grep -q "ok (err" "$work/tty.out" \
    && echo "ok: bench ops shows its progress on a terminal" || fail "bench ops on a terminal: $(cat "$work/tty.out")"
fi

python3 - "$work/a.json" "$work/ceilings.json" <<'PY' || fail "bench ops JSON does not follow the schema"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["schema"] == "genesis.bench.ops/1" and r["tool"] == "genesis" and r["device"] == "cpu", r
for key in ("device_name", "suite", "timing", "ceilings", "cases"):
    assert key in r, key
assert set(r["ceilings"]) >= {"copy_gbps", "gemm_tflops", "gemm_size"}
case_keys = {"name", "op", "shapes", "dtype", "backward", "status", "message", "where", "check_rel_err", "tolerance",
             "median_ms", "p10_ms", "p90_ms", "reps", "bytes", "flops", "gbps", "tflops", "pct_of_ceiling",
             "host_us", "back_to_back_us"}
assert len(r["cases"]) == 24, len(r["cases"])
for c in r["cases"]:
    assert set(c) == case_keys, set(c) ^ case_keys
    assert c["status"] == "ok" and c["check_rel_err"] <= c["tolerance"], c
    assert c["p10_ms"] <= c["median_ms"] <= c["p90_ms"] and c["reps"] >= 3, c
    assert (c["tflops"] is not None) == (c["op"] in ("matmul", "linear")), c
c = json.load(open(sys.argv[2]))
assert c["schema"] == "genesis.bench.ceilings/1" and c["ceilings"]["copy_gbps"] > 0
PY
PYTHONPYCACHEPREFIX="$work/pycache" python3 -m py_compile "$src/scripts/bench/torch_ops.py" "$src/scripts/bench/torch_alloc.py" \
  || fail "scripts/bench/torch_ops.py does not compile"

# The op-case registry as a suite: every case at the tests' sizes, checked and timed; resolved
# for the PyTorch side, and (where a python with torch is installed) every case's PyTorch
# expression checked against the float64 reference the same way.
"$genesis" bench ops "${fast[@]}" --suite all-test --ceilings "$work/ceilings.json" --json "$work/all.json" > "$work/all.txt"
check "bench ops --suite all-test" 0 $?
tail -1 "$work/all.txt" | grep -Eq " 0 FAIL, 0 unsupported, 0 error" || fail "--suite all-test: $(tail -1 "$work/all.txt")"
"$genesis" bench ops --suite all-test --emit-cases "$work/cases.json" -q
check "bench ops --emit-cases" 0 $?
"$genesis" ops --json > "$work/ops.json"
python3 - "$work/cases.json" "$work/ops.json" <<'PY' || fail "--emit-cases: the cases do not cover the op table or miss keys"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["schema"] == "genesis.bench.cases/1", d["schema"]
keys = {"name", "op", "table_op", "shapes", "dtypes", "backward", "axes", "dim", "scalar", "variant", "check_rows",
        "tolerance", "where", "inputs", "torch", "cost", "row_inputs", "random"}
for c in d["cases"]:
    assert set(c) == keys, set(c) ^ keys
    assert c["torch"] and set(c["cost"]) == set(c["dtypes"]), c["name"]
    for i in c["inputs"]:
        assert i["kind"] in ("normal", "positive", "probability", "index", "mask"), i
table = json.load(open(sys.argv[2]))
ops = {op["name"] for op in (table["ops"] if isinstance(table, dict) else table)}
covered = {c["table_op"] for c in d["cases"]}
assert ops and ops <= covered, sorted(ops - covered)
PY
for py in "${PYTHON:-python3}" /usr/bin/python3; do
  if "$py" -c "import torch" 2> /dev/null; then
    "$py" "$src/scripts/bench/torch_ops.py" "$work/cases.json" "${fast[@]}" --json "$work/torch_all.json" \
      > "$work/torch_all.txt" 2> "$work/torch_all.err"
    check "torch_ops.py over the registry's cases" 0 $?
    tail -1 "$work/torch_all.txt" | grep -q " 0 FAIL, .* 0 error" || fail "torch_ops.py: $(grep -v 'ok (err' "$work/torch_all.txt" | head -5)"
    break
  fi
done

"$genesis" bench compare "$work/a.json" "$work/b.json" > "$work/compare.txt"
check "bench compare" 0 $?
grep -q "^softmax 32x50 .*f32 .*x  " "$work/compare.txt" || fail "compare has no softmax ratio row"
grep -q "not in B" "$work/compare.txt" || fail "compare does not mark cases missing from B"
grep -q "2 cases compared: geomean B/A" "$work/compare.txt" || fail "compare summary: $(tail -1 "$work/compare.txt")"

"$genesis" bench alloc --device cpu --pairs 200 --json "$work/alloc.json" > "$work/alloc.txt"
check "bench alloc" 0 $?
for s in same_1MiB large_64MiB transformer pressure random_sizes; do
  grep -q "^$s " "$work/alloc.txt" || fail "bench alloc lacks scenario $s"
done
"$genesis" bench compare "$work/alloc.json" "$work/alloc.json" | grep -q "5 cases compared: geomean B/A 1.00x" \
  || fail "compare of two alloc results"

# bench train: a tiny GPT-2 recipe's step on synthetic tokens, its JSON, and compare of two runs.
tiny=(--set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 --set data.seq_len=16
      --set training.batch_size=2 --device cpu --steps 3 --warmup 1)
"$genesis" bench train "$src/recipes/mobydick_gpt_tiny.toml" "${tiny[@]}" --json "$work/train.json" > "$work/train.txt"
check "bench train" 0 $?
grep -q "tokens/s" "$work/train.txt" || fail "bench train prints no tokens/s"
grep -q "phases: forward" "$work/train.txt" || fail "bench train prints no phase split"
python3 - "$work/train.json" <<'PY' || fail "bench train JSON does not follow the schema"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["schema"] == "genesis.bench.train/1" and r["model"] == "gpt2" and r["flops_per_token"] > 0, r
[c] = r["cases"]
assert c["shapes"] == [[2, 16]] and c["reps"] == 3 and c["median_ms"] > 0 and c["tokens_per_s"] > 0, c
assert c["p10_ms"] <= c["median_ms"] <= c["p90_ms"], c
p = c["phases"]
assert min(p["forward_ms"], p["backward_ms"], p["optimizer_ms"]) > 0, p
assert abs(sum(p.values()) - c["median_ms"]) < 0.5 * c["median_ms"], (p, c["median_ms"])
assert c["packing"] is None, c
PY
"$genesis" bench compare "$work/train.json" "$work/train.json" | grep -q "1 cases compared" \
  || fail "compare of two bench train results"
# -q: nothing on stderr; on a terminal, a bar over the warm-up and timed steps otherwise.
"$genesis" bench train "$src/recipes/mobydick_gpt_tiny.toml" "${tiny[@]}" -q > /dev/null 2> "$work/train_q.err"
check "bench train -q" 0 $?
[ -s "$work/train_q.err" ] && fail "bench train -q wrote to stderr: $(head -2 "$work/train_q.err")"
if command -v script >/dev/null; then
  script -qc "'$genesis' bench train '$src/recipes/mobydick_gpt_tiny.toml' ${tiny[*]}" /dev/null | tr '\r' '\n' \
    > "$work/train_tty.out"
  grep -q "bench train 0/" "$work/train_tty.out" && grep -q "tokens/s" "$work/train_tty.out" \
    && echo "ok: bench train shows its progress on a terminal" || fail "bench train on a terminal: $(cat "$work/train_tty.out")"
fi
# --packed: rows of documents of 3-8 tokens (doc_start, no target at a document's last token)
# through GPT-2 and a qwen2 (RoPE) model, the packing in the JSON; a bad MIN:MAX is a usage error.
"$genesis" bench train "$src/recipes/mobydick_gpt_tiny.toml" "${tiny[@]}" --packed 3:8 --json "$work/packed.json" \
  > "$work/packed.txt"
check "bench train --packed" 0 $?
grep -q "^packed: documents of 3-8 tokens" "$work/packed.txt" || fail "bench train --packed prints no packing line"
qwen=(--set model.vocab_size=256 --set model.hidden_size=32 --set model.intermediate_size=64
      --set model.num_hidden_layers=1 --set model.num_attention_heads=4 --set model.num_key_value_heads=2
      --set amp.dtype=f32 --set data.seq_len=16 --set training.batch_size=2 --device cpu --steps 2 --warmup 1)
"$genesis" bench train "$src/recipes/qwen2_0.5b.toml" "${qwen[@]}" -q --packed 1:16 --json "$work/packed_qwen.json" \
  > /dev/null
check "bench train --packed of a qwen2 recipe" 0 $?
python3 - "$work/packed.json" "$work/packed_qwen.json" <<'PY' || fail "bench train --packed JSON"
import json, math, sys
for path, name, (lo, hi) in ((sys.argv[1], "train step packed 3:8", (3, 8)),
                             (sys.argv[2], "qwen2_0.5b train step packed 1:16", (1, 16))):
    r = json.load(open(path))
    assert r["schema"] == "genesis.bench.train/1", r
    [c] = r["cases"]
    assert c["name"].endswith(name) and c["shapes"] == [[2, 16]], c
    p = c["packing"]
    assert (p["min_doc_length"], p["max_doc_length"], p["rows"]) == (lo, hi, 8), p
    assert 16 / hi <= p["mean_docs_per_row"] <= 16 / lo, p
    assert c["tokens_per_s"] > 0 and math.isfinite(c["final_loss"]) and c["final_loss"] > 0, c
PY
for bad in 5:2 0:10 8 3:x; do
  err=$("$genesis" bench train "$src/recipes/mobydick_gpt_tiny.toml" "${tiny[@]}" --packed "$bad" 2>&1 >/dev/null)
  check "bench train --packed $bad" 2 $?
  [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] && echo "$err" | grep -q "^genesis: error: --packed: expected MIN:MAX" \
    || fail "bench train --packed $bad message: $err"
done
err=$("$genesis" bench train "$src/recipes/fashion_mnist_mlp.toml" --device cpu 2>&1 >/dev/null)
check "bench train of a classifier recipe" 2 $?
echo "$err" | grep -q "not a language model" || fail "bench train classifier message: $err"

# Bad input: exit 2 with one line that names the problem.
err=$("$genesis" bench ops --device cpu --suite "$src/tests/data/bench_bad_op.toml" 2>&1 >/dev/null)
check "unknown op in the suite" 2 $?
echo "$err" | grep -q "bench_bad_op.toml:6: case 'typo': unknown op 'addd'" || fail "unknown op message: $err"
printf '[[case]]\nname = "x"\nop = "add"\nshapes = [[2, 2], [2, 2]]\nrepeat = 3\n' > "$work/bad_key.toml"
err=$("$genesis" bench ops --device cpu --suite "$work/bad_key.toml" 2>&1 >/dev/null)
check "unknown key in a case" 2 $?
echo "$err" | grep -q "bad_key.toml:5: unknown key 'repeat'" || fail "unknown key message: $err"
printf '[[case]]\nname = "x"\nop = "matmul"\nshapes = [[2, 2]]\n' > "$work/bad_shapes.toml"
err=$("$genesis" bench ops --device cpu --suite "$work/bad_shapes.toml" 2>&1 >/dev/null)
check "wrong number of shapes" 2 $?
echo "$err" | grep -q "bad_shapes.toml:1: case 'x' (matmul): expects 2 shapes, got 1" || fail "shapes message: $err"
"$genesis" bench ops --device cpu --suite "$work/missing.toml" >/dev/null 2>&1
check "missing suite file" 2 $?
"$genesis" bench ops --device cpu --suite "$suite" --filter '(' >/dev/null 2>&1
check "invalid --filter" 2 $?
"$genesis" bench ops --device cpu --suite "$suite" --filter 'no such case' >/dev/null 2>&1
check "--filter matching nothing" 2 $?
"$genesis" bench compare "$work/a.json" "$work/alloc.json" >/dev/null 2>&1
check "compare of different schemas" 2 $?
"$genesis" bench compare "$work/a.json" "$work/nothing.json" >/dev/null 2>&1
check "compare of a missing file" 2 $?

finish bench
