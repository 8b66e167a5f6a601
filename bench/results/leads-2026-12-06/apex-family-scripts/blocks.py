import subprocess, json, re, statistics
for v in ["3.0","3.1","4.0","4.1"]:
    g=f"/work/.mirror/mlcommons+training_results_v{v}/repo"
    files=subprocess.run(["git","--git-dir",g,"ls-tree","-r","--name-only","HEAD"],capture_output=True,text=True).stdout.split()
    files=[f for f in files if re.search(r'results/[^/]+/gpt3/result_\d+\.txt$',f) and not f.startswith(("Google","Intel"))]
    for f in files:
        txt=subprocess.run(["git","--git-dir",g,"show","HEAD:"+f],capture_output=True,text=True,errors="replace").stdout
        gbs=None;bs=None;blocks=[];evs=[];evst=None;plat=None;seq=2048;first=None
        for line in txt.splitlines():
            if ":::MLLOG" not in line: continue
            try: d=json.loads(line.split(":::MLLOG",1)[1])
            except Exception: continue
            k=d["key"];t=d["time_ms"]
            if k=="global_batch_size": gbs=d["value"]
            if k=="submission_platform": plat=d["value"]
            if k=="max_sequence_length": seq=d["value"]
            if k=="block_start": bs=(t,d["metadata"].get("epoch_count"))
            if k=="block_stop" and bs: blocks.append(((t-bs[0])/1000,bs[1]))
            if k=="eval_start": evst=t
            if k=="eval_stop" and evst: evs.append((t-evst)/1000)
        if not blocks or not gbs: continue
        per=[]
        for dur,ec in blocks:
            if ec:
                n=ec/(gbs*seq)  # tokens
                per.append(dur/n)
        if not per: continue
        print(v,f.split('/results/')[0],f.split('/')[-3],f.split('/')[-1],plat,"gbs",gbs,"nblk",len(blocks),"steps/blk",round(blocks[-1][1]/(gbs*seq),2),"s/step med",round(statistics.median(per),3),"first",round(per[0],3),"eval med",round(statistics.median(evs),2) if evs else None)
