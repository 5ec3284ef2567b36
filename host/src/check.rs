//! The numerical checks: relative Frobenius error against a reference, with the worst coordinate named.

/// `||out - reference|| / ||reference||`; NaN if any element of `out` is not finite where the reference is.
pub fn rel_err(out: &[f64], reference: &[f64]) -> f64 {
    assert_eq!(out.len(), reference.len(), "rel_err of slices of different lengths");
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (&o, &r) in out.iter().zip(reference) {
        if !o.is_finite() && r.is_finite() {
            return f64::NAN;
        }
        num += (o - r) * (o - r);
        den += r * r;
    }
    if den == 0.0 {
        return if num == 0.0 { 0.0 } else { f64::INFINITY };
    }
    (num / den).sqrt()
}

/// Index and values of the largest absolute difference (NaN counts as largest).
pub fn worst(out: &[f64], reference: &[f64]) -> Option<(usize, f64, f64)> {
    let mut best: Option<(usize, f64)> = None;
    for (i, (&o, &r)) in out.iter().zip(reference).enumerate() {
        let d = if (o - r).is_nan() { f64::INFINITY } else { (o - r).abs() };
        if best.is_none_or(|(_, b)| d > b) {
            best = Some((i, d));
        }
    }
    best.map(|(i, _)| (i, out[i], reference[i]))
}

/// `Ok(err)` when `rel_err <= tol` (NaN never passes); otherwise a message naming `what`, the error and the
/// worst element.
pub fn close(what: &str, out: &[f64], reference: &[f64], tol: f64) -> Result<f64, String> {
    let e = rel_err(out, reference);
    if e <= tol {
        return Ok(e);
    }
    let w = worst(out, reference).map(|(i, o, r)| format!("; worst at [{i}]: got {o}, want {r}")).unwrap_or_default();
    Err(format!("{what}: relative error {e:.3e} > {tol:.1e}{w}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rel_err_basics() {
        assert_eq!(rel_err(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        assert!((rel_err(&[1.1, 0.0], &[1.0, 0.0]) - 0.1).abs() < 1e-12);
        assert!(rel_err(&[f64::NAN, 0.0], &[1.0, 0.0]).is_nan());
        assert!(close("x", &[f64::NAN], &[1.0], 1.0).is_err());
        assert!(close("x", &[1.0, 5.0], &[1.0, 2.0], 0.1).unwrap_err().contains("[1]"));
    }
}
