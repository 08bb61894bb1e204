// bench/experiments/decode_bare_loops.cc -- the least work a split-KV decode
// of one query row per kv head (MHA, issue 14 section 4) can do, timed the way
// `attnflow bench decode` times the kernel: H = 8 heads x 4096 keys x D (64 or
// 128) K and V ([H, L, D]; fp32, F16 or BF16), two threads (four heads each),
// each head in tiles of `tile` keys: a bare Q.K pass (4 keys at a time, the
// kernel's loop without prefetch, masks or softmax) then a bare P.V pass
// (2 keys at a time) over the same tile; after every such call, a plain read
// with the same threads, of a separate buffer of the same size as the
// bench does (mode 1) or of K and V themselves (mode 0); mode 2 = mode 1 with
// a 256 MiB flush read (untimed) before every call and every read, as
// `attnflow bench decode --cold`. Prints min and
// median of 300 calls and median(bare) / median(read).
//
// Not part of the build (x86 with AVX-512 only). Build and run:
//   g++ -O2 -march=native -std=c++20 -pthread bench/experiments/decode_bare_loops.cc -o /tmp/decode_bare_loops
//   /tmp/decode_bare_loops TILE MODE [f32|f16|bf16] [64|128], e.g.
//   /tmp/decode_bare_loops 256 1 f32 64   (16.8 MB; F16/BF16 are converted on load)
//   /tmp/decode_bare_loops 256 0 f16 128
// Results and what they mean: docs/kernels.md, "Decode against a plain read".
#include <immintrin.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>
#include <barrier>
static double Now(){return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();}
// K/V elements: fp32, or F16 converted on load (vcvtph2ps) as the kernel does.
static inline __m512 Ld(const float* p){ return _mm512_loadu_ps(p); }
static inline __m512 Ld(const uint16_t* p){ return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
struct Bf16 { uint16_t bits; };  // BF16: the high half of an fp32
static inline __m512 Ld(const Bf16* p){
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16)); }
template <int D, typename T>
__attribute__((noinline)) void QK(const float* q,const T* k,size_t n,float*s){
  for(size_t j=0;j<n;j+=4){ __m512 a0=_mm512_setzero_ps(),a1=a0,a2=a0,a3=a0; const T* k0=k+j*D;
    #pragma GCC unroll 4
    for(int c=0;c<D;c+=16){ __m512 qv=_mm512_load_ps(q+c); a0=_mm512_fmadd_ps(qv,Ld(k0+c),a0); a1=_mm512_fmadd_ps(qv,Ld(k0+D+c),a1); a2=_mm512_fmadd_ps(qv,Ld(k0+2*D+c),a2); a3=_mm512_fmadd_ps(qv,Ld(k0+3*D+c),a3);}
    s[j]=_mm512_reduce_add_ps(a0); s[j+1]=_mm512_reduce_add_ps(a1); s[j+2]=_mm512_reduce_add_ps(a2); s[j+3]=_mm512_reduce_add_ps(a3);} }
template <int D, typename T>
__attribute__((noinline)) void PV(const float* p,const T* v,size_t n,float*o){
  __m512 a[2][D/16]; for(int c=0;c<D/16;++c){a[0][c]=_mm512_load_ps(o+16*c);a[1][c]=_mm512_setzero_ps();}
  for(size_t j=0;j<n;j+=2){
    #pragma GCC unroll 2
    for(int u=0;u<2;++u){ __m512 pb=_mm512_set1_ps(p[j+u]);
      #pragma GCC unroll 4
      for(int c=0;c<D/16;++c) a[u][c]=_mm512_fmadd_ps(pb,Ld(v+(j+u)*D+16*c),a[u][c]); } }
  for(int c=0;c<D/16;++c) _mm512_store_ps(o+16*c,_mm512_add_ps(a[0][c],a[1][c])); }
__attribute__((noinline)) float Read(const float*x,size_t n){ __m512 a[8]; for(int i=0;i<8;++i)a[i]=_mm512_setzero_ps();
  for(size_t i=0;i<n;i+=128){
    #pragma GCC unroll 8
    for(int u=0;u<8;++u) a[u]=_mm512_add_ps(a[u],_mm512_load_ps(x+i+16*u));
  }
  for(int i=1;i<8;++i) a[0]=_mm512_add_ps(a[0],a[i]);
  return _mm512_reduce_add_ps(a[0]);
}
template <int D, typename T>
int Run(int tile, int mode, const char* name){
  const bool evict_read = mode != 0, cold = mode == 2;
  const int H=8, L=4096, T2=2; int reps=300;
  size_t per=(size_t)L*D; T* K=(T*)aligned_alloc(64,H*per*sizeof(T)); T* V=(T*)aligned_alloc(64,H*per*sizeof(T));
  const size_t rfloats=2*H*per*sizeof(T)/4;  // the same bytes as K and V
  float* R=(float*)aligned_alloc(64,rfloats*4);
  for(size_t i=0;i<H*per;++i){
    if constexpr (sizeof(T)==4){K[i]=1e-3f*(i%7);V[i]=1e-3f*(i%5);}
    else if constexpr (std::is_same_v<T,Bf16>){K[i]=Bf16{static_cast<uint16_t>(0x3A80+(i%7))};V[i]=Bf16{static_cast<uint16_t>(0x3A80+(i%5))};}
    else {K[i]=static_cast<uint16_t>(0x1400+(i%7));V[i]=static_cast<uint16_t>(0x1400+(i%5));}
  }
  for(size_t i=0;i<rfloats;++i)R[i]=1e-3f;
  const size_t fl_floats=cold?(size_t{256}<<20)/4:0; float* F=cold?(float*)aligned_alloc(64,fl_floats*4):nullptr;
  for(size_t i=0;i<fl_floats;++i)F[i]=1e-3f;
  std::vector<double> tk, tr; std::atomic<float> sink{0};
  std::barrier bar(T2);
  auto worker=[&](int t){ alignas(64) float q[D]; for(int i=0;i<D;++i)q[i]=0.1f; std::vector<float> s(L); alignas(64) float o[D]={0};
    for(int r=0;r<reps;++r){ if(cold){ size_t n=fl_floats/T2; sink=sink+Read(F+t*n,n);} bar.arrive_and_wait(); double t0=Now();
      for(int h=t*H/T2;h<(t+1)*H/T2;++h) for(int j=0;j<L;j+=tile){ QK<D>(q,K+h*per+j*D,tile,s.data()+j); PV<D>(s.data()+j,V+h*per+j*D,tile,o);}
      bar.arrive_and_wait(); if(t==0) tk.push_back(Now()-t0); if(cold){ size_t n=fl_floats/T2; sink=sink+Read(F+t*n,n);} bar.arrive_and_wait(); t0=Now();
      if(evict_read){ size_t n=rfloats/T2; sink=sink+Read(R+t*n,n);}
      else { size_t n=H*per*sizeof(T)/4/T2; sink=sink+Read(reinterpret_cast<const float*>(K)+t*n,n)+Read(reinterpret_cast<const float*>(V)+t*n,n);}
      bar.arrive_and_wait(); if(t==0) tr.push_back(Now()-t0); } };
  std::vector<std::thread> th; for(int t=1;t<T2;++t) th.emplace_back(worker,t);
  worker(0);
  for(auto& x:th) x.join();
  std::sort(tk.begin(),tk.end()); std::sort(tr.begin(),tr.end());
  printf("%s D=%d tile %d %s: bare QK+PV min %.1f med %.1f us | read min %.1f med %.1f us | ratio med %.2f\n",name,D,tile, cold?"(cold: 256 MiB flushed before each, separate read buffer)":evict_read?"(separate read buffer, as the bench)":"(read of K/V itself)", tk[0]*1e6,tk[reps/2]*1e6,tr[0]*1e6,tr[reps/2]*1e6,tk[reps/2]/tr[reps/2]);
  return 0;
}
int main(int argc,char**argv){
  const int tile=argc>1?atoi(argv[1]):256; const int evict_read=argc>2?atoi(argv[2]):1;
  const std::string dt=argc>3?argv[3]:"f32";
  const int d=argc>4?atoi(argv[4]):64;
  if(d!=64 && d!=128){ fprintf(stderr,"decode_bare_loops: D must be 64 or 128 (got %d)\n",d); return 1; }
  if(tile<4 || tile%4 || 4096%tile){ fprintf(stderr,"decode_bare_loops: tile must divide 4096 and be a multiple of 4\n"); return 1; }
  if(dt=="f16") return d==64 ? Run<64,uint16_t>(tile,evict_read,"f16") : Run<128,uint16_t>(tile,evict_read,"f16");
  if(dt=="bf16") return d==64 ? Run<64,Bf16>(tile,evict_read,"bf16") : Run<128,Bf16>(tile,evict_read,"bf16");
  if(dt=="f32") return d==64 ? Run<64,float>(tile,evict_read,"f32") : Run<128,float>(tile,evict_read,"f32");
  fprintf(stderr,"decode_bare_loops: dtype must be f32, f16 or bf16 (got %s)\n",dt.c_str());
  return 1;
}
