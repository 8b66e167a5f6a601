import subprocess,json
g="/work/.mirror/mlcommons+training_results_v4.1/repo"
for f in ["Oracle/results/3072xBM.GPU.H100.8/gpt3/result_0.txt","Oracle/results/1536xBM.GPU.H100.8/gpt3/result_0.txt","NVIDIA/results/eos_n64_ngc24.09_nemo/gpt3/result_1.txt"]:
    txt=subprocess.run(["git","--git-dir",g,"show","HEAD:"+f],capture_output=True,text=True).stdout
    bs=None;out=[]
    for line in txt.splitlines():
        if ":::MLLOG" not in line: continue
        d=json.loads(line.split(":::MLLOG",1)[1])
        if d["key"]=="block_start": bs=d["time_ms"]
        if d["key"]=="block_stop": out.append(round((d["time_ms"]-bs)/1000,1))
    print(f.split('/')[2],out)
