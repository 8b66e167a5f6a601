import subprocess,json,statistics,re
rows=[]
for v in ["3.0","3.1"]:
    g=f"/work/.mirror/mlcommons+training_results_v{v}/repo"
    files=[f for f in subprocess.run(["git","--git-dir",g,"ls-tree","-r","--name-only","HEAD"],capture_output=True,text=True).stdout.split() if re.search(r'results/[^/]+/gpt3/result_\d+\.txt$',f) and ('NVIDIA' in f)]
    for f in files:
        txt=subprocess.run(["git","--git-dir",g,"show","HEAD:"+f],capture_output=True,text=True).stdout
        seq=[]
        for line in txt.splitlines():
            if ":::MLLOG" not in line: continue
            d=json.loads(line.split(":::MLLOG",1)[1])
            if d["key"]=="eval_stop": seq.append("E")
            elif d["key"]=="tracked_stats" and "train_step_timing" in d["value"]: seq.append(d["value"]["train_step_timing"])
        p1=[];p2=[];rest=[];k=99
        for x in seq:
            if x=="E": k=0; continue
            k+=1
            if k==1: p1.append(x)
            elif k==2: p2.append(x)
            elif k>=3: rest.append(x)
        if not p1: continue
        m1,m2,mr=statistics.median(p1),statistics.median(p2),statistics.median(rest)
        rows.append((v,f.split('/')[2],f[-5],len(p1),round(m1,3),round(m2,3),round(mr,3),round((mr-m1)*1000,1),round(100*(mr-m1)/mr,2)))
print("ver platform run n_posteval med_step1_after_eval med_step2 med_rest delta_ms delta_%")
for r in rows: print(*r)
