//! The interpolation methods and differential operators a query may ask for, by their
//! JHTDB names, and which method can provide which operator.

use crate::error::{Error, Result};
use crate::interp::names::{
    canonical, unknown, METHOD_ALIASES, METHOD_NAMES, OPERATOR_ALIASES, OPERATOR_NAMES,
};

/// Most nodes of a 1-D stencil (fd8noint: 9).
pub const MAX_WIDTH: usize = 10;

/// How values between grid nodes are obtained along each axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// The value at the nearest node.
    Nearest,
    /// Lagrange polynomial through N = 4, 6 or 8 nodes; derivatives are the polynomial's.
    Lagrange(usize),
    /// Centred finite differences of order N = 4, 6 or 8 at the nearest node.
    FdNoInt(usize),
    /// Fourth-order finite differences at the nodes, interpolated with lag4.
    Fd4Lag4,
    /// JHTDB's smoothing spline of smoothness m over q nodes (MmQq).
    Spline {
        /// Continuity order of the kernel.
        m: usize,
        /// Nodes in the stencil.
        q: usize,
    },
}

/// What is computed from the field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    /// The field itself: `(N, ncomp)`.
    Field,
    /// `∂u_c/∂x_a`: `(N, ncomp, 3)`.
    Gradient,
    /// Second derivatives xx, xy, xz, yy, yz, zz: `(N, ncomp, 6)`.
    Hessian,
    /// `∇²u_c`: `(N, ncomp)`.
    Laplacian,
}

impl Method {
    /// Parses a method name or one of its aliases (case-insensitive).
    pub fn parse(name: &str) -> Result<Self> {
        let method = match canonical(name, METHOD_NAMES, METHOD_ALIASES).unwrap_or("") {
            "none" => Method::Nearest,
            "lag4" => Method::Lagrange(4),
            "lag6" => Method::Lagrange(6),
            "lag8" => Method::Lagrange(8),
            "fd4noint" => Method::FdNoInt(4),
            "fd6noint" => Method::FdNoInt(6),
            "fd8noint" => Method::FdNoInt(8),
            "fd4lag4" => Method::Fd4Lag4,
            "m1q4" => Method::Spline { m: 1, q: 4 },
            "m2q8" => Method::Spline { m: 2, q: 8 },
            _ => return Err(unknown("method", name, METHOD_NAMES)),
        };
        Ok(method)
    }

    /// The method's JHTDB name.
    pub fn name(&self) -> String {
        match self {
            Method::Nearest => "none".into(),
            Method::Lagrange(n) => format!("lag{n}"),
            Method::FdNoInt(n) => format!("fd{n}noint"),
            Method::Fd4Lag4 => "fd4lag4".into(),
            Method::Spline { m, q } => format!("m{m}q{q}"),
        }
    }

    /// The operators this method provides.
    pub fn operators(&self) -> &'static [Operator] {
        use Operator::*;
        match self {
            Method::Nearest => &[Field],
            Method::FdNoInt(_) | Method::Fd4Lag4 => &[Gradient, Hessian, Laplacian],
            // As JHTDB: a C¹ spline has no meaningful second derivative.
            Method::Spline { m: 1, .. } => &[Field, Gradient],
            Method::Lagrange(_) | Method::Spline { .. } => &[Field, Gradient, Hessian, Laplacian],
        }
    }

    /// Fails with the list of operators this method offers if it cannot provide `op`.
    pub fn check_supports(&self, op: Operator) -> Result<()> {
        if self.operators().contains(&op) {
            return Ok(());
        }
        let offered: Vec<&str> = self.operators().iter().map(|o| o.name()).collect();
        Err(Error::InvalidArgument(format!(
            "method {} cannot compute the {}; it offers: {}",
            self.name(),
            op.name(),
            offered.join(", ")
        )))
    }
}

/// One derivative term: derivative orders along x, y, z and the output slot it adds to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Term {
    /// Derivative order along `[x, y, z]`.
    pub orders: [usize; 3],
    /// Output slot (per component) the term is added to.
    pub slot: usize,
}

const fn term(x: usize, y: usize, z: usize, slot: usize) -> Term {
    Term {
        orders: [x, y, z],
        slot,
    }
}

impl Operator {
    /// Parses an operator name or one of its aliases (case-insensitive).
    pub fn parse(name: &str) -> Result<Self> {
        match canonical(name, OPERATOR_NAMES, OPERATOR_ALIASES).unwrap_or("") {
            "field" => Ok(Operator::Field),
            "gradient" => Ok(Operator::Gradient),
            "hessian" => Ok(Operator::Hessian),
            "laplacian" => Ok(Operator::Laplacian),
            _ => Err(unknown("operator", name, OPERATOR_NAMES)),
        }
    }

    /// The operator's name.
    pub fn name(&self) -> &'static str {
        match self {
            Operator::Field => "field",
            Operator::Gradient => "gradient",
            Operator::Hessian => "hessian",
            Operator::Laplacian => "laplacian",
        }
    }

    /// The separable terms whose sums make up the operator.
    pub fn terms(&self) -> &'static [Term] {
        const FIELD: [Term; 1] = [term(0, 0, 0, 0)];
        const GRADIENT: [Term; 3] = [term(1, 0, 0, 0), term(0, 1, 0, 1), term(0, 0, 1, 2)];
        const HESSIAN: [Term; 6] = [
            term(2, 0, 0, 0),
            term(1, 1, 0, 1),
            term(1, 0, 1, 2),
            term(0, 2, 0, 3),
            term(0, 1, 1, 4),
            term(0, 0, 2, 5),
        ];
        const LAPLACIAN: [Term; 3] = [term(2, 0, 0, 0), term(0, 2, 0, 0), term(0, 0, 2, 0)];
        match self {
            Operator::Field => &FIELD,
            Operator::Gradient => &GRADIENT,
            Operator::Hessian => &HESSIAN,
            Operator::Laplacian => &LAPLACIAN,
        }
    }

    /// Output values per component.
    pub fn slots(&self) -> usize {
        match self {
            Operator::Field | Operator::Laplacian => 1,
            Operator::Gradient => 3,
            Operator::Hessian => 6,
        }
    }

    /// The highest derivative order along any one axis.
    pub fn max_order(&self) -> usize {
        match self {
            Operator::Field => 0,
            Operator::Gradient => 1,
            Operator::Hessian | Operator::Laplacian => 2,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for name in METHOD_NAMES {
            assert_eq!(Method::parse(name).unwrap().name(), *name);
        }
        for name in OPERATOR_NAMES {
            assert_eq!(Operator::parse(name).unwrap().name(), *name);
        }
        for (alias, name) in METHOD_ALIASES {
            assert_eq!(Method::parse(alias).unwrap().name(), *name);
        }
    }

    #[test]
    fn refusals_list_what_is_offered() {
        let err = Method::Nearest
            .check_supports(Operator::Gradient)
            .unwrap_err()
            .to_string();
        assert!(err.contains("offers: field"), "{err}");
        let err = Method::parse("lag5").unwrap_err().to_string();
        assert!(err.contains("lag4, lag6, lag8"), "{err}");
    }
}
