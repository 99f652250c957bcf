//! burn 0.19.1's own backend conformance suite (`burn_tensor::testgen_all!` and
//! `burn_autodiff::testgen_all!`, with and without checkpointing), run on the xpu backend,
//! unmodified. Tests burn marks `#[ignore]` stay ignored; the backend adds no exclusions
//! beyond those listed in `EXCLUDED.md` beside this file. With the crate's `suite-fusion`
//! feature the same suite runs on `XpuFusion` (burn-fusion over xpu).

extern crate alloc;

#[allow(unused_imports, clippy::all, missing_docs)]
mod tests {
    #[cfg(not(feature = "suite-fusion"))]
    pub type TestBackend = xpu_burn::Xpu;
    /// With the `suite-fusion` feature: burn-fusion over xpu (element-wise runs fused).
    #[cfg(feature = "suite-fusion")]
    pub type TestBackend = xpu_burn::XpuFusion;
    pub type TestTensor<const D: usize> = burn_tensor::Tensor<TestBackend, D>;
    pub type TestTensorInt<const D: usize> = burn_tensor::Tensor<TestBackend, D, burn_tensor::Int>;
    pub type TestTensorBool<const D: usize> =
        burn_tensor::Tensor<TestBackend, D, burn_tensor::Bool>;

    use alloc::format;
    use alloc::vec;
    use alloc::vec::Vec;

    burn_tensor::testgen_all!();
    burn_autodiff::testgen_all!();
}
