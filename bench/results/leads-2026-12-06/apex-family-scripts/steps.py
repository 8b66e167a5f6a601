import subprocess, json, re, statistics, sys
out=[]
for v in ["3.0","3.1","4.0","4.1"]:
    g=f"/work/.mirror/mlcommons+training_results_v{v}/repo"
    files=subprocess.run(["git","--git-dir",g,"ls-tree","-r","--name-only","HEAD"],capture_output=True,text=True).stdout.split()
    files=[f for f in files if re.search(r'results/[^/]+/gpt3/result_\d+\.txt$',f)]
    for f in files:
        txt=subprocess.run(["git","--git-dir",g,"show","HEAD:"+f],capture_output=True,text=True,errors="replace").stdout
        st=[];gbs=ga=None;plat=None;evals=[];steps_after_eval=[]
        last_eval_stop=None
        recs=[]
        for line in txt.splitlines():
            if ":::MLLOG" not in line: continue
            try: d=json.loads(line.split(":::MLLOG",1)[1])
            except Exception: continue
            k=d["key"]
            if k=="tracked_stats" and isinstance(d["value"],dict) and "train_step_timing" in d["value"]:
                recs.append(("s",d["value"]["train_step_timing"],d["time_ms"]))
            elif k=="global_batch_size": gbs=d["value"]
            elif k=="gradient_accumulation_steps": ga=d["value"]
            elif k=="submission_platform": plat=d["value"]
            elif k in("eval_start","eval_stop"): recs.append((k,None,d["time_ms"]))
        st=[r[1] for r in recs if r[0]=="s"]
        if not st: 
            out.append((v,f,plat,gbs,ga,None)); continue
        # step right after eval_stop
        post=[]; flag=False
        for r in recs:
            if r[0]=="eval_stop": flag=True
            elif r[0]=="s":
                if flag: post.append(r[1]); flag=False
        evt=[]
        s=None
        for r in recs:
            if r[0]=="eval_start": s=r[2]
            if r[0]=="eval_stop" and s: evt.append((r[2]-s)/1000)
        med=statistics.median(st)
        out.append((v,f,plat,gbs,ga,len(st),round(st[0],3),round(med,3),round(min(st),3),round(max(st),3),round(statistics.median(post),3) if post else None, round(statistics.median(evt),2) if evt else None))
for o in out: print(*o, sep=" | ")
