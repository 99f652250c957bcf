//! burn's `ActivationOps` on xpu: burn's defaults (composed of the float ops).

use burn_tensor::ops::ActivationOps;

use crate::Xpu;

impl ActivationOps<Self> for Xpu {}
