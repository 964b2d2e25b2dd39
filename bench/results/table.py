#!/usr/bin/env python3
"""bench/results/table.py OUTDIR: the main job's results tables of
docs/BENCHMARKS.md (markdown) from the --json summaries that
bench/results/run.sh leaves in OUTDIR (mean +- sample standard deviation over
seeds). Standard library only."""
import glob
import json
import os
import statistics
import sys


def ms(values, scale=1.0, digits=3):
    v = [x * scale for x in values if x is not None]
    if not v:
        return "n/a"
    if len(v) == 1:
        return f"{v[0]:.{digits}f}"
    return f"{statistics.mean(v):.{digits}f} ± {statistics.stdev(v):.{digits}f}"


def load(pattern):
    """The finished runs (a run still going has an empty summary file)."""
    runs = []
    for f in sorted(glob.glob(pattern)):
        try:
            runs.append(json.load(open(f)))
        except ValueError:
            pass
    return runs


def main(out):
    presets = ["32-true", "16-mixed", "bf16-mixed"]
    print("Emoji image-text pairs, mm-tiny, 500 steps, trained on google + openmoji, "
          "new style = twitter (seeds: n per row)\n")
    print("| precision | n | final train loss | new style R@1 i2t / t2i | new style R@5 i2t / t2i"
          " | zero-shot R@1 i2t / t2i | zero-shot R@5 i2t / t2i | group acc (new style) |"
          " matching acc (new style): hardest / random negatives |"
          " skipped steps | ms/step | activations MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for p in presets:
        runs = load(os.path.join(out, f"{p}.s*.json"))
        if not runs:
            continue
        m = lambda split, key: [r["metrics"][split][key] for r in runs]
        print(f"| `{p}` | {len(runs)} | {ms([r['final_train_loss'] for r in runs])} | "
              f"{ms(m('new_style', 'i2t_r1'), 1, 4)} / {ms(m('new_style', 't2i_r1'), 1, 4)} | "
              f"{ms(m('new_style', 'i2t_r5'))} / {ms(m('new_style', 't2i_r5'))} | "
              f"{ms(m('zero_shot', 'i2t_r1'))} / {ms(m('zero_shot', 't2i_r1'))} | "
              f"{ms(m('zero_shot', 'i2t_r5'))} / {ms(m('zero_shot', 't2i_r5'))} | "
              f"{ms(m('new_style', 'group_acc'))} | {ms(m('new_style', 'itm_acc'))} / "
              f"{ms([r['metrics']['new_style'].get('itm_acc_random') for r in runs])} | "
              f"{ms([r['skipped_steps'] for r in runs], 1, 0)} | "
              f"{ms([r['ms_per_step_mean'] for r in runs], 1, 0)} | "
              f"{ms([r['activation_bytes'] for r in runs], 1 / 1048576, 1)} |")
    any_run = [r for r in load(os.path.join(out, "*.s*.json")) if "new_style" in r.get("metrics", {})]
    if any_run:
        r = any_run[0]["metrics"]
        print(f"\nChance R@1: new style {r['new_style']['chance_r1']:.4f}, "
              f"zero-shot {r['zero_shot']['chance_r1']:.4f}.")
    print("\nFashion-MNIST, vit-fm, 400 steps\n")
    print("| precision | n | test accuracy | final train loss | skipped steps |")
    print("|---|---|---|---|---|")
    for p in presets:
        runs = load(os.path.join(out, f"fm.{p}.s*.json"))
        if runs:
            print(f"| `{p}` | {len(runs)} | {ms([r['metrics']['test_accuracy'] for r in runs])} | "
                  f"{ms([r['final_train_loss'] for r in runs])} | "
                  f"{ms([r['skipped_steps'] for r in runs], 1, 0)} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
