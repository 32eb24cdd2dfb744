import json, sys
def rows(f):
    d=json.load(open(f)); R=d['rows'] if isinstance(d,dict) else d
    return {(r['seed'],r['case'],r['crop'],r['lung']):r for r in R}
a=rows(sys.argv[1]); b=rows(sys.argv[2])
keys=sorted(set(a)&set(b), key=str)
up=dn=0
for k in keys:
    x,y=a[k]['found'],b[k]['found']
    if abs(x-y)>0.15:
        up+= y>x; dn+= y<x
        print(k, f"{a[k]['ref_ml']:.0f} mL  {x:.2f}/{a[k]['other']:.2f} -> {y:.2f}/{b[k]['other']:.2f}")
print("common", len(keys), "up", up, "down", dn, "only a", len(set(a)-set(b)), "only b", len(set(b)-set(a)))
