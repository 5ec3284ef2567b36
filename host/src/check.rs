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

/// `||out - reference|| / ||scale||` within `tol`, for values whose rounding error follows a scale of their own
/// rather than their size: a dot product's error is that of its terms (`scale`, e.g. the 2-norm of the terms), and
/// terms of both signs can cancel to a value far smaller. Where no cancellation happens `||scale||` is about
/// `||reference||`, so a wrong value fails as it would under [`close`]. NaN never passes.
pub fn close_scaled(what: &str, out: &[f64], reference: &[f64], scale: &[f64], tol: f64) -> Result<f64, String> {
    assert_eq!(reference.len(), scale.len(), "close_scaled: reference and scale of different lengths");
    assert_eq!(out.len(), reference.len(), "close_scaled: out and reference of different lengths");
    let num: f64 = out.iter().zip(reference).map(|(o, r)| (o - r) * (o - r)).sum();
    let den: f64 = scale.iter().map(|v| v * v).sum();
    // NaN where out is not finite (a NaN or infinite difference), exact zero only for an exact match
    let e = if out.iter().any(|v| !v.is_finite()) {
        f64::NAN
    } else if den == 0.0 {
        if num == 0.0 {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        (num / den).sqrt()
    };
    if e <= tol {
        return Ok(e);
    }
    let w = worst(out, reference).map(|(i, o, r)| format!("; worst at [{i}]: got {o}, want {r}")).unwrap_or_default();
    Err(format!("{what}: error {e:.3e} of the terms' scale > {tol:.1e}{w}"))
}

/// [`close`] row by row (rows of `row_len` elements): the largest row error when every row's is within `tol`, else a
/// message naming `what`, the row and its error. One number over a whole large tensor hides a wrong row (a dropped
/// slot among 32768 moves the whole-tensor error by ~0.5e-2); a row's own error does not. A row whose reference is
/// zero passes only when it is zero too (a masked token).
pub fn close_rows(what: &str, out: &[f64], reference: &[f64], row_len: usize, tol: f64) -> Result<f64, String> {
    assert_eq!(out.len(), reference.len(), "close_rows: out and reference of different lengths");
    assert!(row_len > 0 && out.len() % row_len == 0, "close_rows: {} elements are not rows of {row_len}", out.len());
    let mut max = 0.0f64;
    for (r, (o, w)) in out.chunks(row_len).zip(reference.chunks(row_len)).enumerate() {
        let e = rel_err(o, w);
        // NaN (a non-finite output) fails: it is not within the tolerance
        if e.is_nan() || e > tol {
            return Err(format!("{what}: row {r}: relative error {e:.3e} > {tol:.1e}"));
        }
        max = max.max(e);
    }
    Ok(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_rows_finds_one_wrong_row_that_the_whole_tensor_hides() {
        let rows = 4096;
        let reference: Vec<f64> = (0..rows * 8).map(|i| ((i * 37 % 101) as f64 - 50.0) / 50.0).collect();
        let mut out = reference.clone();
        out[5 * 8..6 * 8].fill(0.0); // one row dropped
        assert!(close("whole", &out, &reference, 2e-2).is_ok(), "the whole tensor hides it");
        let m = close_rows("rows", &out, &reference, 8, 3e-2).unwrap_err();
        assert!(m.contains("row 5"), "{m}");
        // zero rows: a zero output passes, anything else fails; NaN fails
        let (mut z, zr) = (vec![0.0; 16], vec![0.0; 16]);
        assert_eq!(close_rows("zeros", &z, &zr, 8, 1e-2), Ok(0.0));
        z[9] = 1e-30;
        assert!(close_rows("zeros", &z, &zr, 8, 1e-2).unwrap_err().contains("row 1"));
        let mut n = reference.clone();
        n[7] = f64::NAN;
        assert!(close_rows("nan", &n, &reference, 8, 1e-2).unwrap_err().contains("row 0"));
    }

    #[test]
    fn rel_err_basics() {
        assert_eq!(rel_err(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        assert!((rel_err(&[1.1, 0.0], &[1.0, 0.0]) - 0.1).abs() < 1e-12);
        assert!(rel_err(&[f64::NAN, 0.0], &[1.0, 0.0]).is_nan());
        assert!(close("x", &[f64::NAN], &[1.0], 1.0).is_err());
        assert!(close("x", &[1.0, 5.0], &[1.0, 2.0], 0.1).unwrap_err().contains("[1]"));
    }

    #[test]
    fn close_scaled_basics() {
        // a value cancelled to 0.01 from terms of size 1: an error of 0.005 is small against the terms
        assert!(close_scaled("x", &[0.015], &[0.01], &[1.0], 1e-2).is_ok());
        assert!(close("x", &[0.015], &[0.01], 1e-2).is_err());
        // a wrong value of the terms' size fails, as does NaN or infinity
        assert!(close_scaled("x", &[1.0, 0.0], &[0.0, 1.0], &[1.0, 1.0], 1e-2).unwrap_err().contains("[0]"));
        assert!(close_scaled("x", &[f64::NAN], &[1.0], &[1.0], 1.0).is_err());
        assert!(close_scaled("x", &[f64::INFINITY], &[1.0], &[1.0], 1.0).is_err());
        assert_eq!(close_scaled("x", &[0.0], &[0.0], &[0.0], 1e-2), Ok(0.0));
    }
}
