// bench/experiments/decode_bare_loops.cc -- the least work a split-KV decode
// of one query row per kv head (MHA, issue 14 section 4) can do, timed the way
// `attnflow bench decode` times the kernel: H = 8 heads x 4096 keys x D = 64
// fp32 K and V ([H, L, D], 16.8 MB), two threads (four heads each), each
// head in tiles of `tile` keys: a bare Q.K pass (4 keys at a time, the
// kernel's loop without prefetch, masks or softmax) then a bare P.V pass
// (2 keys at a time) over the same tile; after every such call, a plain read
// with the same threads, of a separate buffer of the same size as the
// bench does (mode 1) or of K and V themselves (mode 0). Prints min and
// median of 300 calls and median(bare) / median(read).
//
// Not part of the build (x86 with AVX-512 only). Build and run:
//   g++ -O2 -march=native -std=c++20 -pthread \
//       bench/experiments/decode_bare_loops.cc -o /tmp/decode_bare_loops
//   /tmp/decode_bare_loops 256 1; /tmp/decode_bare_loops 256 0
// Results and what they mean: docs/kernels.md, "Decode against a plain read".
#include <immintrin.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include <barrier>
static double Now(){return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();}
constexpr int D=64;
__attribute__((noinline)) void QK(const float* q,const float* k,size_t n,float*s){
  for(size_t j=0;j<n;j+=4){ __m512 a0=_mm512_setzero_ps(),a1=a0,a2=a0,a3=a0; const float* k0=k+j*D;
    #pragma GCC unroll 4
    for(int c=0;c<D;c+=16){ __m512 qv=_mm512_load_ps(q+c); a0=_mm512_fmadd_ps(qv,_mm512_loadu_ps(k0+c),a0); a1=_mm512_fmadd_ps(qv,_mm512_loadu_ps(k0+D+c),a1); a2=_mm512_fmadd_ps(qv,_mm512_loadu_ps(k0+2*D+c),a2); a3=_mm512_fmadd_ps(qv,_mm512_loadu_ps(k0+3*D+c),a3);}
    s[j]=_mm512_reduce_add_ps(a0); s[j+1]=_mm512_reduce_add_ps(a1); s[j+2]=_mm512_reduce_add_ps(a2); s[j+3]=_mm512_reduce_add_ps(a3);} }
__attribute__((noinline)) void PV(const float* p,const float* v,size_t n,float*o){
  __m512 a[2][D/16]; for(int c=0;c<D/16;++c){a[0][c]=_mm512_load_ps(o+16*c);a[1][c]=_mm512_setzero_ps();}
  for(size_t j=0;j<n;j+=2){
    #pragma GCC unroll 2
    for(int u=0;u<2;++u){ __m512 pb=_mm512_set1_ps(p[j+u]);
      #pragma GCC unroll 4
      for(int c=0;c<D/16;++c) a[u][c]=_mm512_fmadd_ps(pb,_mm512_loadu_ps(v+(j+u)*D+16*c),a[u][c]); } }
  for(int c=0;c<D/16;++c) _mm512_store_ps(o+16*c,_mm512_add_ps(a[0][c],a[1][c])); }
__attribute__((noinline)) float Read(const float*x,size_t n){ __m512 a[8]; for(int i=0;i<8;++i)a[i]=_mm512_setzero_ps();
  for(size_t i=0;i<n;i+=128){
    #pragma GCC unroll 8
    for(int u=0;u<8;++u) a[u]=_mm512_add_ps(a[u],_mm512_load_ps(x+i+16*u)); }
  for(int i=1;i<8;++i)a[0]=_mm512_add_ps(a[0],a[i]); return _mm512_reduce_add_ps(a[0]); }
int main(int argc,char**argv){
  const int H=8, L=4096, T=2; int tile=argc>1?atoi(argv[1]):256; int reps=300; bool evict_read=argc>2?atoi(argv[2]):1;
  size_t per=(size_t)L*D; float* K=(float*)aligned_alloc(64,H*per*4); float* V=(float*)aligned_alloc(64,H*per*4); float* R=(float*)aligned_alloc(64,2*H*per*4);
  for(size_t i=0;i<H*per;++i){K[i]=1e-3f*(i%7);V[i]=1e-3f*(i%5);} for(size_t i=0;i<2*H*per;++i)R[i]=1e-3f;
  std::vector<double> tk, tr; std::atomic<float> sink{0};
  std::barrier bar(T);
  auto worker=[&](int t){ alignas(64) float q[D]; for(int i=0;i<D;++i)q[i]=0.1f; std::vector<float> s(L); alignas(64) float o[D]={0};
    for(int r=0;r<reps;++r){ bar.arrive_and_wait(); double t0=Now();
      for(int h=t*H/T;h<(t+1)*H/T;++h) for(int j=0;j<L;j+=tile){ QK(q,K+h*per+j*D,tile,s.data()+j); PV(s.data()+j,V+h*per+j*D,tile,o);} 
      bar.arrive_and_wait(); if(t==0) tk.push_back(Now()-t0); bar.arrive_and_wait(); t0=Now();
      if(evict_read){ size_t n=2*H*per/T; sink=sink+Read(R+t*n,n);} else { size_t n=H*per/T; sink=sink+Read(K+t*n,n)+Read(V+t*n,n);} 
      bar.arrive_and_wait(); if(t==0) tr.push_back(Now()-t0); } };
  std::vector<std::thread> th; for(int t=1;t<T;++t) th.emplace_back(worker,t);
  worker(0);
  for(auto& x:th) x.join();
  std::sort(tk.begin(),tk.end()); std::sort(tr.begin(),tr.end());
  printf("tile %d %s: bare QK+PV min %.1f med %.1f us | read min %.1f med %.1f us | ratio med %.2f\n",tile, evict_read?"(separate read buffer, as the bench)":"(read of K/V itself)", tk[0]*1e6,tk[reps/2]*1e6,tr[0]*1e6,tr[reps/2]*1e6,tk[reps/2]/tr[reps/2]);
}
