# Fit step = c * m * (1 + (PP-1)/(VP*m)) + X  per (version, cluster) with identical configs across scales.
# Step times: medians of train_step_timing (v3.x) from steps.txt / blocks.txt (see FINDINGS.md)
import itertools
PP=8
sets={
 "v3.1 NVIDIA Eos (VP12,mbs1)":[(512,128,11.055),(768,128,11.075),(4096,16,1.608),(6144,16,1.615),(8192,16,1.619),(10240,8,0.926),(10752,8,0.930)],
 "v3.0 CoreWeave (VP12,mbs1)":[(768,128,12.30),(1536,64,6.34),(3584,24,2.60)],
}
VP=12
for name,pts in sets.items():
    # least squares on a=m*(1+7/(VP*m)) -> a = m + 7/VP
    A=[(m+(PP-1)/VP) for g,m,t in pts]; T=[t for g,m,t in pts]
    n=len(A); ma=sum(A)/n; mt=sum(T)/n
    c=sum((a-ma)*(t-mt) for a,t in zip(A,T))/sum((a-ma)**2 for a in A); X=mt-c*ma
    print(name, "c(per-microbatch, all VP chunks, fwd+bwd) = %.4f s, X(fixed per step) = %.3f s"%(c,X))
    for (g,m,t),a in zip(pts,A):
        pred=c*a+X; bub=c*(PP-1)/VP
        print("   gpus=%5d m=%3d measured=%.3f fit=%.3f  ideal-bubble=%.3f s (%.1f%%)  X/step=%.1f%%"%(g,m,t,pred,bub,100*bub/t,100*X/t))
