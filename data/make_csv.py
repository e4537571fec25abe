#!/usr/bin/env python3
"""Makes the tables of the CSV example recipes (recipes/csv_tiers_mlp.toml, csv_spend_mlp.toml):
customers with numeric and categorical columns and the tier they end up in, a classification a
linear model cannot quite do, or (--task regression) their monthly spend, a number. Deterministic
(seeded), standard library only, nothing downloaded.

  data/make_csv.py [--out DATA_ROOT] [--train 20000] [--test 10000] [--seed 1] [--missing 0.01]
                   [--task classification|regression]
  (DATA_ROOT: the data root of data/genesis_paths.py)

Produces OUT/csv_tiers/train.csv and test.csv with the header
  age,income,tenure_months,visits,balance,region,plan,city,tier
age, income, tenure_months, visits and balance are numbers on very different scales (income in
the tens of thousands, balance around zero); region, plan and city are categories (city names
hold commas and quotes, so they are quoted as RFC 4180 says); tier is the label: bronze, silver,
gold or platinum. A fraction --missing of the input values is left empty (the recipe imputes
them), never a label. --task regression writes OUT/csv_spend/ instead, the same columns with the
label spend = 100 + 40 * score (the score the tier is cut from, its noise included), and prints the
R^2 its noise leaves reachable on the test rows.
"""
import argparse
import csv
import math
import os
import random

from genesis_paths import data_root  # noqa: E402  beside this script

REGIONS = {"north": 0.3, "south": -0.2, "east": 0.1, "west": -0.4, "central": 0.0}
PLANS = {"basic": -0.6, "plus": 0.1, "pro": 0.6}
CITIES = {'Springfield, IL': 0.2, 'Portland, OR': -0.1, 'Austin, TX': 0.3, 'Salem, "Witch City"': -0.3,
          'Dover, DE': 0.0, 'Århus': 0.15}
TIERS = ["bronze", "silver", "gold", "platinum"]
COLUMNS = ["age", "income", "tenure_months", "visits", "balance", "region", "plan", "city", "tier"]


def row(rng, missing):
    age = max(18.0, rng.gauss(45, 12))
    income = math.exp(rng.gauss(math.log(50000), 0.5))
    tenure = rng.randint(0, 120)
    visits = min(40, int(rng.expovariate(1 / 6)))
    balance = rng.gauss(0, 1500)
    region = rng.choice(list(REGIONS))
    plan = rng.choices(list(PLANS), weights=[5, 3, 2])[0]
    city = rng.choice(list(CITIES))
    # A score with interactions and a periodic term, then noise: the tier is its quartile.
    score = (0.035 * (age - 45) + 0.9 * math.log(income / 50000) + 0.012 * (tenure - 60) + 0.45 * math.sin(visits / 2.5)
             + 0.00025 * balance * (1.0 if plan == "pro" else 0.3) + REGIONS[region] + PLANS[plan] + CITIES[city]
             + (0.02 * (age - 45) if region == "north" else 0.0))
    noise = rng.gauss(0, 0.15)
    score += noise
    tier = TIERS[0 if score < -0.55 else 1 if score < 0.05 else 2 if score < 0.65 else 3]
    values = [f"{age:.1f}", f"{income:.2f}", str(tenure), str(visits), f"{balance:.2f}", region, plan, city]
    values = ["" if rng.random() < missing else v for v in values]
    return values, tier, score, noise


def spend(score):
    return 100 + 40 * score


def write(path, columns, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        out = csv.writer(f, lineterminator="\r\n")  # RFC 4180's CRLF
        out.writerow(columns)
        out.writerows(rows)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=data_root())
    p.add_argument("--train", type=int, default=20000)
    p.add_argument("--test", type=int, default=10000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--missing", type=float, default=0.01)
    p.add_argument("--task", choices=["classification", "regression"], default="classification")
    a = p.parse_args()
    rng = random.Random(a.seed)
    made = [row(rng, a.missing) for _ in range(a.train + a.test)]
    regression = a.task == "regression"
    out = os.path.join(a.out, "csv_spend" if regression else "csv_tiers")
    os.makedirs(out, exist_ok=True)
    columns = COLUMNS[:-1] + (["spend"] if regression else COLUMNS[-1:])
    rows = [values + ([f"{spend(score):.2f}"] if regression else [tier]) for values, tier, score, _ in made]
    write(os.path.join(out, "train.csv"), columns, rows[: a.train])
    write(os.path.join(out, "test.csv"), columns, rows[a.train:])
    if regression:
        # The best any model can do: predict the score without its noise.
        test = made[a.train:]
        mean = sum(spend(score) for _, _, score, _ in test) / len(test)
        total = sum((spend(score) - mean) ** 2 for _, _, score, _ in test)
        residual = sum((40 * noise) ** 2 for _, _, _, noise in test)
        print(f"{out}: {a.train} training rows, {a.test} test rows; spend mean {mean:.2f}, "
              f"reachable test R^2 {1 - residual / total:.4f}")
    else:
        counts = {t: sum(r[-1] == t for r in rows) for t in TIERS}
        print(f"{out}: {a.train} training rows, {a.test} test rows; tiers {counts}")


if __name__ == "__main__":
    main()
