//! Tile configurations of the M-grouped engine and the typed heuristic that picks one per launch.
//!
//! Every M-grouped kernel the module exports is one [`TileConfig`]: its epilogue, how A reaches shared memory,
//! B's layout, the tile (rows x columns), the pipeline depth, the schedule of its two consumer warpgroups, the
//! CTAs per cluster and its shared memory. A launch states its [`Problem`] (which epilogue, A load and B layout
//! it needs, and how many column tiles it has); [`choose`] checks every configuration against it and the
//! device's [`Limits`] and returns the pick with the reason each other configuration was rejected
//! ([`Rejection`], printable). No configuration qualifying is an [`Error::InvalidArgument`] listing the reasons.
use std::fmt;

use megamoe_kernels::kernels_host as kh;

use crate::error::{Error, Result};
use crate::gemm::BLayout;

/// What the epilogue does with the accumulators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Epilogue {
    /// bf16 store.
    Bf16,
    /// bf16 store of each row to a row of C the caller names, times that row's factor.
    Bf16Scatter,
    /// SwiGLU: h = silu(g) u (and z = [g | u] when asked).
    Swiglu,
    /// SwiGLU backward from z: dz, s h, and the dtopk partial sums.
    SwigluBackward,
}

/// How A's rows reach shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ALoad {
    /// TMA from expert-ordered rows.
    Tma,
    /// The producer warpgroup gathers token rows (`cp.async`; no multicast).
    Gather,
}

/// How the two consumer warpgroups share the tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// Both run every tile (64 rows each): one 128 x 256 tile at a time.
    Cooperative,
    /// Each runs every other tile (all 128 rows), so one's epilogue runs under the other's main loop.
    PingPong,
    /// Cooperative main loop; idle warps (the producer warpgroup's three, or those and a fourth warpgroup) run
    /// the epilogue from a bf16 copy of the tile in shared memory while the consumers go on to the next tile
    /// (`grouped_gemm_bt_dswiglu_ew`, `_ew7`).
    EpilogueWarps,
}

/// Which SwiGLU-backward kernel the policy (`MEGAMOE_DSW`) runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dsw {
    /// The ping-pong kernel (`grouped_gemm_bt_dswiglu`, 128 x 128 tiles, `pp`).
    PingPong,
    /// The epilogue-warps kernel with three epilogue warps (`grouped_gemm_bt_dswiglu_ew`, 128 x 256, `ew`).
    Ew,
    /// The epilogue-warps kernel with seven (`grouped_gemm_bt_dswiglu_ew7`, 4 warpgroups, 128 x 192, `ew7`).
    Ew7,
    /// The same in 128 x 128 tiles (`grouped_gemm_bt_dswiglu_ew7n`, `ew7n`): no padding columns where I needs as
    /// many 128-column tiles as 192-column ones (I = 256: two either way).
    Ew7n,
}

/// The operand the two CTAs of a cluster share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Share {
    /// A: the pair runs n-tiles 2j and 2j + 1 of one m-tile (needs an even number of n-tiles).
    A,
    /// B: the pair runs m-tiles 2i and 2i + 1 of one n-tile (multicast when both are one expert's).
    B,
}

/// One kernel of the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileConfig {
    /// The exported kernel.
    pub kernel: &'static str,
    /// Its epilogue.
    pub epilogue: Epilogue,
    /// How it loads A.
    pub a: ALoad,
    /// The B layout it reads.
    pub b: BLayout,
    /// Rows of a tile.
    pub bm: u32,
    /// Columns of C a tile covers (the SwiGLU tile: 128 of h, from 128 gate and 128 up columns of z).
    pub bn: u32,
    /// Ring stages.
    pub stages: u32,
    /// The consumers' schedule.
    pub schedule: Schedule,
    /// CTAs per cluster (2: the pair shares an operand by TMA multicast, see `share`).
    pub cluster: u32,
    /// What a 2-CTA cluster shares: A (n-tiles 2j, 2j + 1 of one m-tile) or B (m-tiles 2i, 2i + 1 of one n-tile);
    /// `None` for a single CTA.
    pub share: Option<Share>,
    /// Dynamic shared memory per block.
    pub smem: u32,
}

const fn cfg(kernel: &'static str, epilogue: Epilogue, a: ALoad, b: BLayout, share: Option<Share>) -> TileConfig {
    let dsw = matches!(epilogue, Epilogue::SwigluBackward);
    TileConfig {
        kernel,
        epilogue,
        a,
        b,
        bm: kh::GEMM_BM,
        bn: match epilogue {
            Epilogue::Bf16 | Epilogue::Bf16Scatter => kh::GEMM_BN,
            Epilogue::Swiglu => kh::GEMM_BN / 2,
            Epilogue::SwigluBackward => kh::GEMM_DSW_BN,
        },
        stages: if dsw { kh::GEMM_DSW_STAGES } else { kh::GEMM_STAGES },
        schedule: if dsw { Schedule::PingPong } else { Schedule::Cooperative },
        cluster: if share.is_some() { 2 } else { 1 },
        share,
        smem: if dsw { kh::GEMM_DSW_SMEM } else { kh::GEMM_SMEM },
    }
}

/// The epilogue-warps GEMM1 + SwiGLU (`grouped_gemm_swiglu_ew7*`: 4 warpgroups, tiles of 96 columns of h, the
/// seven-warp layout's ring) loading A by `a`.
const fn ew7_swiglu(kernel: &'static str, a: ALoad) -> TileConfig {
    TileConfig {
        kernel,
        epilogue: Epilogue::Swiglu,
        a,
        b: BLayout::NK,
        bm: kh::GEMM_BM,
        bn: kh::GEMM_EW7_BN / 2,
        stages: kh::GEMM_EW7_STAGES,
        schedule: Schedule::EpilogueWarps,
        cluster: 1,
        share: None,
        smem: kh::GEMM_SMEM,
    }
}

/// The seven-warp dh + SwiGLU backward (`grouped_gemm_bt_dswiglu_ew7*`: 4 warpgroups, 192-column tiles, the same
/// ring) loading A by `a`.
const fn ew7_dswiglu(kernel: &'static str, a: ALoad) -> TileConfig {
    TileConfig { epilogue: Epilogue::SwigluBackward, b: BLayout::KN, bn: kh::GEMM_EW7_BN, ..ew7_swiglu(kernel, a) }
}

/// Its narrow variant (`grouped_gemm_bt_dswiglu_ew7n*`: 128-column tiles, a 5-stage ring of 32 KiB stages).
const fn ew7n_dswiglu(kernel: &'static str, a: ALoad) -> TileConfig {
    TileConfig { bn: kh::GEMM_EW7N_BN, stages: kh::GEMM_EW7N_STAGES, ..ew7_dswiglu(kernel, a) }
}

use ALoad::{Gather, Tma};
use BLayout::{KN, NK};
use Epilogue::{Bf16, Bf16Scatter, Swiglu, SwigluBackward};

/// Every M-grouped kernel of the module, in order of preference among those that qualify (a cluster variant
/// before its single-CTA kernel).
pub const CONFIGS: &[TileConfig] = &[
    cfg("grouped_gemm_bf16_mcb", Bf16, Tma, NK, Some(Share::B)),
    cfg("grouped_gemm_bf16_mc", Bf16, Tma, NK, Some(Share::A)),
    cfg("grouped_gemm_bf16", Bf16, Tma, NK, None),
    cfg("grouped_gemm_bf16_scatter", Bf16Scatter, Tma, NK, None),
    cfg("grouped_gemm_bt_bf16_mcb", Bf16, Tma, KN, Some(Share::B)),
    cfg("grouped_gemm_bt_bf16_mc", Bf16, Tma, KN, Some(Share::A)),
    cfg("grouped_gemm_bt_bf16", Bf16, Tma, KN, None),
    ew7_swiglu("grouped_gemm_swiglu_ew7", Tma),
    cfg("grouped_gemm_swiglu_mcb", Swiglu, Tma, NK, Some(Share::B)),
    cfg("grouped_gemm_swiglu_mc", Swiglu, Tma, NK, Some(Share::A)),
    cfg("grouped_gemm_swiglu", Swiglu, Tma, NK, None),
    ew7_swiglu("grouped_gemm_swiglu_ew7_gather", Gather),
    cfg("grouped_gemm_swiglu_gather", Swiglu, Gather, NK, None),
    ew7_dswiglu("grouped_gemm_bt_dswiglu_ew7_gather", Gather),
    ew7_dswiglu("grouped_gemm_bt_dswiglu_ew7", Tma),
    ew7n_dswiglu("grouped_gemm_bt_dswiglu_ew7n_gather", Gather),
    ew7n_dswiglu("grouped_gemm_bt_dswiglu_ew7n", Tma),
    TileConfig {
        kernel: "grouped_gemm_bt_dswiglu_ew",
        epilogue: SwigluBackward,
        a: Tma,
        b: KN,
        bm: kh::GEMM_BM,
        bn: kh::GEMM_BN,
        stages: kh::GEMM_EW_STAGES,
        schedule: Schedule::EpilogueWarps,
        cluster: 1,
        share: None,
        smem: kh::GEMM_SMEM,
    },
    cfg("grouped_gemm_bt_dswiglu_mc", SwigluBackward, Tma, KN, Some(Share::A)),
    cfg("grouped_gemm_bt_dswiglu", SwigluBackward, Tma, KN, None),
];

/// One launch as the heuristic sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The epilogue it needs.
    pub epilogue: Epilogue,
    /// How A is to be loaded.
    pub a: ALoad,
    /// B's layout.
    pub b: BLayout,
    /// Columns of C (h's for SwiGLU: I).
    pub n: u32,
}

impl Problem {
    /// Column tiles of `c` over this problem.
    pub fn n_tiles(&self, c: &TileConfig) -> u32 {
        self.n.div_ceil(c.bn)
    }
}

/// What the device and the caller allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Dynamic shared memory a block may opt in to.
    pub smem_optin: u32,
    /// Whether the cluster variants sharing A may be chosen (`MEGAMOE_MC` containing `a`, or `1`, while they are
    /// being measured).
    pub share_a: bool,
    /// Whether those sharing B may (`MEGAMOE_MC` containing `b`).
    pub share_b: bool,
    /// The SwiGLU-backward kernel the policy runs (`MEGAMOE_DSW`): the epilogue-warps configurations other than
    /// its own are rejected; the ping-pong ones stay, ranked after it.
    pub dsw: Dsw,
    /// Whether GEMM1 + SwiGLU may run as the epilogue-warps kernel (`MEGAMOE_SWIGLU`: unset or `ew7` on, `coop` off).
    pub swiglu_ew7: bool,
}

/// Why a configuration was not chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// It has another epilogue.
    Epilogue { has: Epilogue, needs: Epilogue },
    /// It loads A another way.
    ALoad { has: ALoad, needs: ALoad },
    /// It reads B in another layout.
    BLayout { has: BLayout, needs: BLayout },
    /// Its shared memory exceeds the device's opt-in limit.
    SharedMemory { needs: u32, device: u32 },
    /// A 2-CTA cluster pairs column tiles; this problem has an odd number.
    OddColumnTiles { n_tiles: u32 },
    /// Cluster variants sharing this operand are off (`Limits::share_a`, `share_b`).
    ClustersOff { share: Share },
    /// An epilogue-warps kernel the policy does not run (`Limits::dsw`).
    DswPolicy { is: Dsw, policy: Dsw },
    /// The epilogue-warps GEMM1 + SwiGLU is off (`Limits::swiglu_ew7`).
    SwigluEw7Off,
    /// It qualifies, but `chosen` comes first in [`CONFIGS`].
    Ranked { chosen: &'static str },
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::Epilogue { has, needs } => write!(f, "its epilogue is {has:?}, the launch needs {needs:?}"),
            Rejection::ALoad { has, needs } => write!(f, "it loads A by {has:?}, the launch needs {needs:?}"),
            Rejection::BLayout { has, needs } => write!(f, "it reads B as {has:?}, the launch's B is {needs:?}"),
            Rejection::SharedMemory { needs, device } => {
                write!(f, "it needs {needs} B of shared memory per block, the device allows {device}")
            }
            Rejection::OddColumnTiles { n_tiles } => {
                write!(f, "its 2-CTA clusters pair column tiles and the launch has {n_tiles}")
            }
            Rejection::ClustersOff { share } => {
                write!(f, "cluster variants sharing {share:?} are off (MEGAMOE_MC=a, b or ab turns them on)")
            }
            Rejection::SwigluEw7Off => {
                write!(f, "the epilogue-warps GEMM1 + SwiGLU is off (MEGAMOE_SWIGLU=coop)")
            }
            Rejection::DswPolicy { is, policy } => {
                write!(f, "it is the {is:?} SwiGLU backward and the policy (MEGAMOE_DSW) runs {policy:?}")
            }
            Rejection::Ranked { chosen } => write!(f, "it qualifies but {chosen} ranks first"),
        }
    }
}

/// The configuration chosen for a problem and the reason every other one was not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    /// The pick.
    pub config: TileConfig,
    /// Every other configuration with its reason, in [`CONFIGS`] order.
    pub rejected: Vec<(TileConfig, Rejection)>,
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.config.kernel)?;
        for (c, r) in &self.rejected {
            write!(f, "; not {}: {r}", c.kernel)?;
        }
        Ok(())
    }
}

/// Why `c` cannot run `p` under `l`, or `None` when it can.
pub fn check(c: &TileConfig, p: &Problem, l: &Limits) -> Option<Rejection> {
    if c.epilogue != p.epilogue {
        return Some(Rejection::Epilogue { has: c.epilogue, needs: p.epilogue });
    }
    if c.a != p.a {
        return Some(Rejection::ALoad { has: c.a, needs: p.a });
    }
    if c.b != p.b {
        return Some(Rejection::BLayout { has: c.b, needs: p.b });
    }
    if c.smem > l.smem_optin {
        return Some(Rejection::SharedMemory { needs: c.smem, device: l.smem_optin });
    }
    if c.schedule == Schedule::EpilogueWarps && c.epilogue == Swiglu && !l.swiglu_ew7 {
        return Some(Rejection::SwigluEw7Off);
    }
    if c.schedule == Schedule::EpilogueWarps && c.epilogue == SwigluBackward {
        let is = match c.bn {
            kh::GEMM_EW7_BN => Dsw::Ew7,
            kh::GEMM_EW7N_BN => Dsw::Ew7n,
            _ => Dsw::Ew,
        };
        if is != l.dsw {
            return Some(Rejection::DswPolicy { is, policy: l.dsw });
        }
    }
    match c.share {
        Some(share @ Share::A) if !l.share_a => return Some(Rejection::ClustersOff { share }),
        Some(share @ Share::B) if !l.share_b => return Some(Rejection::ClustersOff { share }),
        Some(Share::A) => {
            let n_tiles = p.n_tiles(c);
            if n_tiles % c.cluster != 0 {
                return Some(Rejection::OddColumnTiles { n_tiles });
            }
        }
        _ => {}
    }
    None
}

/// The first configuration of [`CONFIGS`] that runs `p` under `l`, with the reasons for all others; an
/// [`Error::InvalidArgument`] naming every reason when none does.
pub fn choose(p: &Problem, l: &Limits) -> Result<Choice> {
    let verdicts: Vec<(TileConfig, Option<Rejection>)> = CONFIGS.iter().map(|c| (*c, check(c, p, l))).collect();
    let Some(config) = verdicts.iter().find(|(_, r)| r.is_none()).map(|(c, _)| *c) else {
        let why: Vec<String> = verdicts.iter().filter_map(|(c, r)| r.map(|r| format!("{}: {r}", c.kernel))).collect();
        return Err(Error::InvalidArgument(format!("no grouped-GEMM kernel runs {p:?}: {}", why.join("; "))));
    };
    let rejected = verdicts
        .into_iter()
        .filter(|(c, _)| c.kernel != config.kernel)
        .map(|(c, r)| (c, r.unwrap_or(Rejection::Ranked { chosen: config.kernel })))
        .collect();
    Ok(Choice { config, rejected })
}

/// The configuration exported as `kernel`.
pub fn config(kernel: &str) -> Option<&'static TileConfig> {
    CONFIGS.iter().find(|c| c.kernel == kernel)
}

#[cfg(test)]
mod tests {
    use super::*;

    const H200: Limits =
        Limits { smem_optin: 232448, share_a: false, share_b: false, dsw: Dsw::PingPong, swiglu_ew7: false };

    fn p(epilogue: Epilogue, a: ALoad, b: BLayout, n: u32) -> Problem {
        Problem { epilogue, a, b, n }
    }

    #[test]
    fn every_config_is_in_the_manifest_with_its_cluster_block_and_shared_memory() {
        for c in CONFIGS {
            let spec = megamoe_kernels::manifest::find(c.kernel).unwrap_or_else(|| panic!("{} not exported", c.kernel));
            assert_eq!(spec.cluster, c.cluster, "{}", c.kernel);
            assert_eq!(kh::m_grouped_smem(c.kernel), c.smem, "{}", c.kernel);
            // the launch takes its threads from the manifest: a 4-warpgroup kernel (the `_ew7` ones) run with 384
            // would wait forever for its fourth warpgroup's epilogue warps
            let four = c.schedule == Schedule::EpilogueWarps && c.kernel.contains("_ew7");
            assert_eq!(spec.max_threads, if four { 512 } else { kh::GEMM_THREADS }, "{}", c.kernel);
            assert!(spec.spill_free && spec.mma, "{}", c.kernel);
        }
    }

    #[test]
    fn clusters_off_picks_the_single_cta_kernel_and_says_why_not_the_cluster_one() {
        let ch = choose(&p(Bf16, Tma, NK, 2048), &H200).unwrap();
        assert_eq!(ch.config.kernel, "grouped_gemm_bf16");
        assert_eq!(ch.rejected.len(), CONFIGS.len() - 1);
        let mc = ch.rejected.iter().find(|(c, _)| c.kernel == "grouped_gemm_bf16_mc").unwrap();
        assert_eq!(mc.1, Rejection::ClustersOff { share: Share::A });
        let sw = ch.rejected.iter().find(|(c, _)| c.kernel == "grouped_gemm_swiglu").unwrap();
        assert_eq!(sw.1, Rejection::Epilogue { has: Swiglu, needs: Bf16 });
        assert!(ch.to_string().contains("not grouped_gemm_bf16_mc: cluster variants sharing A are off"), "{ch}");
    }

    #[test]
    fn clusters_on_pick_the_cluster_kernel_for_even_column_tiles_only() {
        let on = Limits { share_a: true, ..H200 };
        // 30B: GEMM2 N = 2048 (8 tiles of 256), dh + SwiGLU backward I = 768 (6 of 128), dh plain 768 (3 of 256)
        let ch = choose(&p(Bf16, Tma, NK, 2048), &on).unwrap();
        assert_eq!(ch.config.kernel, "grouped_gemm_bf16_mc");
        let single = ch.rejected.iter().find(|(c, _)| c.kernel == "grouped_gemm_bf16").unwrap();
        assert_eq!(single.1, Rejection::Ranked { chosen: "grouped_gemm_bf16_mc" });
        assert_eq!(choose(&p(SwigluBackward, Tma, KN, 768), &on).unwrap().config.kernel, "grouped_gemm_bt_dswiglu_mc");
        let ch = choose(&p(Bf16, Tma, KN, 768), &on).unwrap();
        assert_eq!(ch.config.kernel, "grouped_gemm_bt_bf16");
        let mc = ch.rejected.iter().find(|(c, _)| c.kernel == "grouped_gemm_bt_bf16_mc").unwrap();
        assert_eq!(mc.1, Rejection::OddColumnTiles { n_tiles: 3 });
        // a partial last tile counts: 448 columns are 4 tiles of 128
        assert_eq!(choose(&p(SwigluBackward, Tma, KN, 448), &on).unwrap().config.kernel, "grouped_gemm_bt_dswiglu_mc");
    }

    #[test]
    fn b_sharing_ranks_first_and_needs_no_even_column_tiles() {
        let both = Limits { share_a: true, share_b: true, ..H200 };
        // dh plain at 30B: 3 column tiles (A sharing cannot pair them), B sharing can
        let ch = choose(&p(Bf16, Tma, KN, 768), &both).unwrap();
        assert_eq!(ch.config.kernel, "grouped_gemm_bt_bf16_mcb");
        let a = ch.rejected.iter().find(|(c, _)| c.kernel == "grouped_gemm_bt_bf16_mc").unwrap();
        assert_eq!(a.1, Rejection::OddColumnTiles { n_tiles: 3 });
        // the SwiGLU backward has only an A-sharing variant
        let b_only = Limits { share_b: true, ..H200 };
        let ch = choose(&p(SwigluBackward, Tma, KN, 768), &b_only).unwrap();
        assert_eq!(ch.config.kernel, "grouped_gemm_bt_dswiglu");
    }

    #[test]
    fn the_epilogue_warps_kernel_only_when_asked_and_with_its_own_column_tiles() {
        let dsw = p(SwigluBackward, Tma, KN, 768);
        let ch = choose(&dsw, &H200).unwrap();
        assert_eq!(ch.config.kernel, "grouped_gemm_bt_dswiglu");
        let ew = ch.rejected.iter().find(|(c, _)| c.kernel == "grouped_gemm_bt_dswiglu_ew").unwrap();
        assert_eq!(ew.1, Rejection::DswPolicy { is: Dsw::Ew, policy: Dsw::PingPong });
        let on = Limits { dsw: Dsw::Ew, ..H200 };
        let ch = choose(&dsw, &on).unwrap();
        assert_eq!(ch.config.kernel, "grouped_gemm_bt_dswiglu_ew");
        let ew7 = ch.rejected.iter().find(|(c, _)| c.kernel == "grouped_gemm_bt_dswiglu_ew7").unwrap();
        assert_eq!(ew7.1, Rejection::DswPolicy { is: Dsw::Ew7, policy: Dsw::Ew });
        // 30B: I = 768 is 3 tiles of 256 (the partial sums' columns), 6 of 128 for the ping-pong kernel
        assert_eq!((dsw.n_tiles(&ch.config), dsw.n_tiles(config("grouped_gemm_bt_dswiglu").unwrap())), (3, 6));
        // the seven-warp kernel: 4 tiles of 192
        let on7 = Limits { dsw: Dsw::Ew7, ..H200 };
        let ch = choose(&dsw, &on7).unwrap();
        assert_eq!((ch.config.kernel, dsw.n_tiles(&ch.config)), ("grouped_gemm_bt_dswiglu_ew7", 4));
        // dy gathered by the producer: the seven-warp policy's gathering form only (no other SwiGLU backward
        // gathers; under another policy nothing qualifies and the layer gathers dy by the pass instead)
        let gather = p(SwigluBackward, Gather, KN, 768);
        let ch = choose(&gather, &on7).unwrap();
        assert_eq!((ch.config.kernel, gather.n_tiles(&ch.config)), ("grouped_gemm_bt_dswiglu_ew7_gather", 4));
        let err = choose(&gather, &on).unwrap_err().to_string();
        assert!(err.contains("grouped_gemm_bt_dswiglu_ew7_gather") && err.contains("Ew7"), "{err}");
        // other epilogues never pick them
        assert_eq!(choose(&p(Bf16, Tma, KN, 768), &on).unwrap().config.kernel, "grouped_gemm_bt_bf16");
        assert_eq!(choose(&p(Bf16, Tma, KN, 768), &on7).unwrap().config.kernel, "grouped_gemm_bt_bf16");
    }

    #[test]
    fn the_narrow_seven_warp_kernel_only_under_its_policy_with_128_column_tiles() {
        let on7n = Limits { dsw: Dsw::Ew7n, ..H200 };
        // I = 256: two tiles of 128 (the 192-column kernel's two: one full, one a third full)
        for (a, kernel) in [(Tma, "grouped_gemm_bt_dswiglu_ew7n"), (Gather, "grouped_gemm_bt_dswiglu_ew7n_gather")] {
            let dsw = p(SwigluBackward, a, KN, 256);
            let ch = choose(&dsw, &on7n).unwrap();
            assert_eq!((ch.config.kernel, dsw.n_tiles(&ch.config)), (kernel, 2));
            let wide = kernel.replace("_ew7n", "_ew7");
            let why = ch.rejected.iter().find(|(c, _)| c.kernel == wide).unwrap();
            assert_eq!(why.1, Rejection::DswPolicy { is: Dsw::Ew7, policy: Dsw::Ew7n });
            let seven = choose(&dsw, &Limits { dsw: Dsw::Ew7, ..H200 }).unwrap();
            assert_eq!((seven.config.kernel, dsw.n_tiles(&seven.config)), (wide.as_str(), 2));
            let why = seven.rejected.iter().find(|(c, _)| c.kernel == kernel).unwrap();
            assert_eq!(why.1, Rejection::DswPolicy { is: Dsw::Ew7n, policy: Dsw::Ew7 });
        }
        // its stages fit the shared engine's memory
        let c = config("grouped_gemm_bt_dswiglu_ew7n").unwrap();
        assert_eq!((c.bn, c.stages, c.smem), (128, kh::GEMM_EW7N_STAGES, kh::GEMM_SMEM));
    }

    #[test]
    fn the_epilogue_warps_gemm1_only_when_asked_with_either_a_load() {
        let sw = p(Swiglu, Tma, NK, 768);
        let ch = choose(&sw, &H200).unwrap();
        assert_eq!(ch.config.kernel, "grouped_gemm_swiglu");
        let ew = ch.rejected.iter().find(|(c, _)| c.kernel == "grouped_gemm_swiglu_ew7").unwrap();
        assert_eq!(ew.1, Rejection::SwigluEw7Off);
        let on = Limits { swiglu_ew7: true, ..H200 };
        let ch = choose(&sw, &on).unwrap();
        // 30B: I = 768 is 8 tiles of 96 columns of h (192 of z), 6 of 128 for the cooperative kernel
        assert_eq!((ch.config.kernel, sw.n_tiles(&ch.config)), ("grouped_gemm_swiglu_ew7", 8));
        assert_eq!(sw.n_tiles(config("grouped_gemm_swiglu").unwrap()), 6);
        // the gathering producer likewise: the epilogue-warps form when the policy asks, the cooperative one else
        let gather = p(Swiglu, Gather, NK, 768);
        let ch = choose(&gather, &on).unwrap();
        assert_eq!((ch.config.kernel, gather.n_tiles(&ch.config)), ("grouped_gemm_swiglu_ew7_gather", 8));
        let ch = choose(&gather, &H200).unwrap();
        assert_eq!(ch.config.kernel, "grouped_gemm_swiglu_gather");
        let ew = ch.rejected.iter().find(|(c, _)| c.kernel == "grouped_gemm_swiglu_ew7_gather").unwrap();
        assert_eq!(ew.1, Rejection::SwigluEw7Off);
        // the SwiGLU backward's policy does not reach it
        let both = Limits { dsw: Dsw::Ew7, ..on };
        assert_eq!(choose(&sw, &both).unwrap().config.kernel, "grouped_gemm_swiglu_ew7");
    }

    #[test]
    fn the_gathering_producer_has_no_cluster_variant() {
        // (the cooperative gathering kernel: the epilogue-warps policy off, as H200 holds it)
        let on = Limits { share_a: true, share_b: true, ..H200 };
        let ch = choose(&p(Swiglu, Gather, NK, 768), &on).unwrap();
        assert_eq!(ch.config.kernel, "grouped_gemm_swiglu_gather");
        let mc = ch.rejected.iter().find(|(c, _)| c.kernel == "grouped_gemm_swiglu_mc").unwrap();
        assert_eq!(mc.1, Rejection::ALoad { has: Tma, needs: Gather });
    }

    #[test]
    fn no_qualifying_kernel_is_an_error_with_every_reason() {
        let small = Limits { smem_optin: 100 * 1024, ..H200 };
        let e = choose(&p(Bf16, Tma, NK, 2048), &small).unwrap_err().to_string();
        assert!(e.contains("grouped_gemm_bf16: it needs 232"), "{e}");
        assert!(e.contains("the device allows 102400"), "{e}");
        assert!(e.contains("grouped_gemm_swiglu: its epilogue is Swiglu"), "{e}");
    }
}
