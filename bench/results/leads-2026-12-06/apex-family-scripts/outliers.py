import subprocess,json,statistics,sys
def load(v,f):
    g=f"/work/.mirror/mlcommons+training_results_v{v}/repo"
    txt=subprocess.run(["git","--git-dir",g,"show","HEAD:"+f],capture_output=True,text=True).stdout
    st=[]
    for line in txt.splitlines():
        if '"tracked_stats"' in line:
            d=json.loads(line.split(":::MLLOG",1)[1]); x=d["value"].get("train_step_timing"); (st.append(x) if x is not None else None)
    return st
for v,f in [("3.0","NVIDIA/results/dgxh100_n64_nemo/gpt3/result_0.txt"),("3.0","NVIDIA/results/dgxh100_n64_nemo/gpt3/result_2.txt"),("3.0","NVIDIA_CoreWeave/results/coreweave_hgxh100_n448_ngc23.04_pytorch/gpt3/result_0.txt"),("3.1","NVIDIA/results/eos_n64_ngc23.09_nemo/gpt3/result_1.txt"),("3.1","NVIDIA/results/eos-dfw_n512_ngc23.09_nemo/gpt3/result_0.txt")]:
    st=load(v,f); med=statistics.median(st)
    out=[(i,round(s,3)) for i,s in enumerate(st) if s>med*1.03]
    mean=statistics.mean(st)
    print(v,f.split('/')[2],f[-12:],"n",len(st),"median",round(med,4),"mean",round(mean,4),"p10",round(sorted(st)[len(st)//10],4),"p90",round(sorted(st)[9*len(st)//10],4),"outliers(>3%)",out[:12])
