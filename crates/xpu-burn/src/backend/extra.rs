//! Float ops composed of others on the device: `cross`.

use crate::error::{or_panic, Error};
use crate::ops::{elementwise, index, layout};
use crate::tensor::XpuTensor;

/// The cross product of 3-vectors along `dim` (inputs broadcast), as burn's `cross`.
pub(crate) fn cross(lhs: &XpuTensor, rhs: &XpuTensor, dim: usize) -> XpuTensor {
    or_panic((|| {
        if lhs.shape.get(dim) != Some(&3) || rhs.shape.get(dim) != Some(&3) {
            return Err(Error::Invalid(format!(
                "cross product needs size 3 along dim {dim}: {:?} and {:?}",
                lhs.shape, rhs.shape
            )));
        }
        let comp = |t: &XpuTensor, k: usize| {
            let mut r: Vec<_> = t.shape.iter().map(|&n| (0..n, 1isize)).collect();
            r[dim] = (k..k + 1, 1);
            layout::slice(t, &r)
        };
        let (a0, a1, a2) = (comp(lhs, 0)?, comp(lhs, 1)?, comp(lhs, 2)?);
        let (b0, b1, b2) = (comp(rhs, 0)?, comp(rhs, 1)?, comp(rhs, 2)?);
        let d = lhs.dtype;
        let m = |x: &XpuTensor, y: &XpuTensor, z: &XpuTensor, w: &XpuTensor| {
            elementwise::map(
                elementwise::MapSpec::builtin("a0 * a1 - a2 * a3", d),
                &[x, y, z, w],
                &[],
            )
        };
        let c0 = m(&a1, &b2, &a2, &b1)?;
        let c1 = m(&a2, &b0, &a0, &b2)?;
        let c2 = m(&a0, &b1, &a1, &b0)?;
        index::cat(&[c0, c1, c2], dim)
    })())
}
