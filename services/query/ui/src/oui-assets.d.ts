declare module '@opensearch-project/oui/es/components/icon/assets/*' {
  import type { ComponentType, SVGProps } from 'react';
  export const icon: ComponentType<SVGProps<SVGSVGElement>>;
}

declare module '@opensearch-project/oui/es/components/icon/icon' {
  import type { ComponentType, SVGProps } from 'react';
  export function appendIconComponentCache(icons: Record<string, ComponentType<SVGProps<SVGSVGElement>>>): void;
}

declare module '@opensearch-project/oui/es/eui_components/icon/icon' {
  import type { ComponentType, SVGProps } from 'react';
  export function appendIconComponentCache(icons: Record<string, ComponentType<SVGProps<SVGSVGElement>>>): void;
}
