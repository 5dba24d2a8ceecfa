// form-clusters{x=2}: the K and V copies of flash attention's key loop are the same for the two query blocks of
// a cluster and are marked cluster_shared; the Q copy (each block's own rows) is not. GEMM clustered along M
// shares B. The default pipeline then multicasts the shared ring refills (multicast-cluster-copies): each CTA
// issues its half of the box to both, the empty barriers count both CTAs' consumers, and cluster barriers
// follow the mbarrier init and precede the exit. Causal attention is refused by name, and so are, at Tile level,
// clusters multicast could not serve: past 8 blocks, or 3 (128 rows do not split into slices of whole periods).
// RUN: tessera-opt %S/../../../examples/flash_attention.mlir -p 'form-clusters{x=2}' | filecheck %s
// RUN: tessera-opt %S/../../../examples/gemm.mlir -p 'form-clusters{x=2}' | filecheck %s --check-prefix=GEMM
// RUN: tessera-opt %S/../../../examples/flash_attention.mlir -p 'form-clusters{x=2},assign-swizzle,pipeline-loops{stages=2},overlap-softmax,peel-masked-iterations,convert-tile-to-sm90,canonicalize,cse,rematerialize-constants,warp-specialize,multicast-cluster-copies' | filecheck %s --check-prefix=TARGET
// RUN: tessera-opt %S/../../../examples/flash_attention.mlir -p 'form-clusters{x=2},assign-swizzle,pipeline-loops{stages=2},overlap-softmax,peel-masked-iterations,convert-tile-to-sm90,canonicalize,cse,rematerialize-constants,warp-specialize,multicast-cluster-copies,allocate-registers' -t ptx | filecheck %s --check-prefix=PTX
// RUN: not tessera-opt %S/../../../examples/flash_attention.mlir -p 'form-clusters{x=16},assign-swizzle,pipeline-loops{stages=2},overlap-softmax,peel-masked-iterations,convert-tile-to-sm90,canonicalize,cse,rematerialize-constants,warp-specialize,multicast-cluster-copies' 2>&1 | filecheck %s --check-prefix=LIMIT
// RUN: not tessera-opt %S/../../../examples/flash_attention.mlir -p 'form-clusters{x=3}' 2>&1 | filecheck %s --check-prefix=SLICES
// RUN: python -c "import tessera; print(tessera.print_module(tessera.kernels.flash_attention(causal=True)))" > %t.mlir
// RUN: not tessera-opt %t.mlir -p 'form-clusters{x=2}' 2>&1 | filecheck %s --check-prefix=CAUSAL

// CHECK:      tile.cluster = array<i64: 2, 1, 1>
// CHECK:      tile.cp_async %q_window, %q_smem :
// CHECK:      tile.cp_async %k_window, %k_smem cluster_shared :
// CHECK:      tile.cp_async %v_window, %v_smem cluster_shared :

// GEMM:       tile.cp_async %a_window, %a_smem :
// GEMM:       tile.cp_async %b_window, %b_smem cluster_shared :

// TARGET:     sm90.box = [64 : i64, 64 : i64, 1 : i64, 1 : i64]
// TARGET:     sm90.mbarrier_init %k_ring_empty, 512
// TARGET:     sm90.bar_sync 0, 384
// TARGET-NEXT: sm90.cluster_arrive
// TARGET-NEXT: sm90.cluster_wait
// TARGET:     sm90.tma_load_multicast %K_map128[{{.*}}], {{.*}} mask 3
// TARGET:     sm90.mapa
// TARGET:     sm90.mbarrier_arrive_cluster
// TARGET:     sm90.cluster_arrive
// TARGET-NEXT: sm90.cluster_wait
// TARGET-NEXT: func.return

// PTX:        .explicitcluster
// PTX:        barrier.cluster.arrive.release;
// PTX-NEXT:   // sm90.cluster_wait
// PTX-NEXT:   barrier.cluster.wait.acquire;
// PTX:        mov.u32 %{{.*}}, %cluster_ctarank;
// PTX:        cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%{{.*}}], [%{{.*}}, {%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}}], [%{{.*}}], 3;
// PTX:        mapa.shared::cluster.u32
// PTX:        mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%{{.*}}];

// LIMIT:      form-clusters: cluster (16, 1, 1) has 16 thread blocks, more than the 8 a cluster may hold (up to 16 with the non-portable cluster size opt-in): clusters of 1, 2, 4, 8 blocks share this kernel's copies
// LIMIT-NOT:  Traceback

// SLICES:     form-clusters: tile.cp_async %k_window, %k_smem : {{.*}}: a cluster of 3 blocks cannot multicast this copy's TMA box: its 128 rows do not split among the cluster's 3 blocks; clusters of 1, 2, 4, 8 blocks share this kernel's copies
// SLICES-NOT: Traceback

// CAUSAL:     form-clusters: tile.cp_async %k_window, %k_smem : {{.*}}: the blocks of a cluster along x copy the same window here, but the scf.for around it depends on the program id along x
