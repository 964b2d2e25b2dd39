#!/usr/bin/env python3
"""bench/step/compare_seeds.py NAME=DIR{s}/LABEL ...: one Markdown table row per
run over seeds 1, 2, 3 of `ampc compare` outputs: mean +- sample standard
deviation of the training loss over the last 20 steps (from DIR/LABEL.jsonl),
zero-shot R@1 and R@5 (image to text), new-style R@1, group accuracy, and
the verdicts. {s} in the path is replaced by the seed, e.g.
  python3 bench/step/compare_seeds.py "fp8-mixed=cmp-seed{s}/fp8-mixed"
(docs/DIAGNOSIS.md, "Beyond FP16", made its tables with it)."""
import json, sys, statistics as S, os
def one(path_jsonl, summ, label):
    st=[o for o in map(json.loads, open(path_jsonl)) if o.get('event')=='step']
    last=[o['loss'] for o in st[-20:]]
    r=[x for x in summ['runs'] if x['label']==label][0]
    e=r['eval']; ns=e.get('new_style',{}); zs=e.get('zero_shot',{})
    return dict(loss20=sum(last)/len(last), zs_r1=zs.get('i2t_r1',0), zs_r5=zs.get('i2t_r5',0),
                ns_r1=ns.get('i2t_r1',0), group=ns.get('group_acc',0), itm=ns.get('itm_acc',0),
                verdict=r['verdicts'][0] if r['verdicts'] else '', ms=r['ms_per_step'])
rows=[]
for arg in sys.argv[1:]:
    name, pat = arg.split('=',1)
    vals=[]
    for s in (1,2,3):
        d=pat.replace('{s}',str(s)); base=os.path.dirname(d); label=os.path.basename(d)
        summ=json.load(open(os.path.join(base,'summary.json')))
        vals.append(one(os.path.join(base,label+'.jsonl'), summ, label))
    def ms(k, f=4):
        xs=[v[k] for v in vals]; return "%.*f ± %.*f" % (f, S.mean(xs), f, S.stdev(xs))
    verd=", ".join(sorted(set(v['verdict'] for v in vals)))
    print("| `%s` | %s | %s | %s | %s | %s | %s |" % (name, ms('loss20',3), ms('zs_r1',3), ms('zs_r5',3), ms('ns_r1',4), ms('group',3), verd))
